/**
 * Failed logins at the token issuer, limited per client address and per user. A key's window
 * opens at its first failure and lasts `windowMs`; once it holds as many failures as the limit,
 * the key is locked until the window ends, and the issuer answers its logins 429 without
 * checking a password (each check is up to two scrypt runs, the issuer's costliest work), a
 * correct one too: telling it apart would take the check the lock saves. Successful logins are
 * not counted, and do not clear a count (a holder of one grant could otherwise reset its
 * address between guesses at another grant's password).
 *
 * Pure: every call takes `now` (ms on a monotonic clock). Memory is bounded: each table keeps at
 * most `maxTracked` keys, forgetting ended windows first, then the oldest running ones.
 */

/** How many failed logins are allowed, and for how long a lock lasts. */
export interface LoginLimits {
  /** Failures from one client address within a window before the address is locked. */
  perAddress: number;
  /** Failures as one user within a window, from any address, before the user is locked. */
  perUser: number;
  /** A window's length in ms, from its first failure; a lock lasts until it ends. */
  windowMs: number;
  /** Keys each table (addresses, users) holds at most. */
  maxTracked: number;
}

/** 10 failures a minute per address, 5 per user; 10,000 addresses and 10,000 users tracked at most. */
export const DEFAULT_LOGIN_LIMITS: Readonly<LoginLimits> = { perAddress: 10, perUser: 5, windowMs: 60_000, maxTracked: 10_000 };

/** One login: where it comes from, and the user it names when the name can be one (undefined: counted by address only). */
export interface LoginAttempt {
  address: string;
  user?: string;
}

/** A lock in force on a login. */
export interface LoginLock {
  /** What is locked: the client address, or the user (from every address). */
  by: "address" | "user";
  /** The failures that locked it, within {@link LoginLimits.windowMs}. */
  failures: number;
  /** How long until the lock ends, in ms (more than 0). */
  retryAfterMs: number;
}

interface Window {
  start: number;
  failures: number;
}

/** Failure counts per key in fixed windows that open at a key's first failure; see the file comment. */
export class FailureWindows {
  /** In the order the windows opened: the oldest first. */
  private readonly windows = new Map<string, Window>();

  constructor(
    private readonly windowMs: number,
    private readonly maxTracked: number,
  ) {}

  /** The failures of `key` in its window at `now`, and how long until that window ends (ms). */
  count(key: string, now: number): { failures: number; endsInMs: number } {
    const w = this.current(key, now);
    return w ? { failures: w.failures, endsInMs: w.start + this.windowMs - now } : { failures: 0, endsInMs: 0 };
  }

  /** Counts a failure of `key` at `now`, opening its window when none runs. */
  record(key: string, now: number): void {
    let w = this.current(key, now);
    if (!w) {
      this.makeRoom(now);
      w = { start: now, failures: 0 };
      this.windows.set(key, w);
    }
    w.failures += 1;
  }

  /** How many keys it holds now. */
  get size(): number {
    return this.windows.size;
  }

  private current(key: string, now: number): Window | undefined {
    const w = this.windows.get(key);
    if (w && now - w.start < this.windowMs) return w;
    this.windows.delete(key);
    return undefined;
  }

  /** Below `maxTracked` keys: ended windows go first (they are the oldest), then the oldest running ones. */
  private makeRoom(now: number): void {
    for (const [key, w] of this.windows) {
      if (this.windows.size < this.maxTracked && now - w.start < this.windowMs) break;
      this.windows.delete(key);
    }
  }
}

/** The issuer's limiter: one table of client addresses, one of users. */
export class LoginLimiter {
  readonly limits: Readonly<LoginLimits>;
  private readonly byAddress: FailureWindows;
  private readonly byUser: FailureWindows;

  /** Throws an Error naming a limit that is not a positive whole number. */
  constructor(limits: Partial<LoginLimits> = {}) {
    const l = { ...DEFAULT_LOGIN_LIMITS, ...limits };
    for (const [name, v] of Object.entries(l)) {
      if (!(Number.isSafeInteger(v) && v >= 1)) throw new Error(`login limit ${name} must be a whole number from 1, not ${v}`);
    }
    this.limits = l;
    this.byAddress = new FailureWindows(l.windowMs, l.maxTracked);
    this.byUser = new FailureWindows(l.windowMs, l.maxTracked);
  }

  /** The lock on `attempt` at `now` (the longer one when both are locked), or undefined when it may log in. */
  lockOf(attempt: LoginAttempt, now: number): LoginLock | undefined {
    const locks: LoginLock[] = [];
    const address = this.byAddress.count(attempt.address, now);
    if (address.failures >= this.limits.perAddress) locks.push({ by: "address", failures: address.failures, retryAfterMs: address.endsInMs });
    if (attempt.user !== undefined) {
      const user = this.byUser.count(attempt.user, now);
      if (user.failures >= this.limits.perUser) locks.push({ by: "user", failures: user.failures, retryAfterMs: user.endsInMs });
    }
    return locks.sort((a, b) => b.retryAfterMs - a.retryAfterMs)[0];
  }

  /** Counts a failed login of `attempt` at `now`, against its address and its user. */
  recordFailure(attempt: LoginAttempt, now: number): void {
    this.byAddress.record(attempt.address, now);
    if (attempt.user !== undefined) this.byUser.record(attempt.user, now);
  }

  /** How many addresses and users it tracks now (each at most {@link LoginLimits.maxTracked}). */
  get tracked(): { addresses: number; users: number } {
    return { addresses: this.byAddress.size, users: this.byUser.size };
  }
}
