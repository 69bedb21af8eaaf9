/**
 * The SDK as a rotation holder: one instance of a module's part holding one grant's credential.
 * It registers itself (KV `mesh-holders`, refreshed while it runs) so a rotation waits for it,
 * yields the current generation and then each rotated one, and the application calls
 * `confirm()` on an update once it has switched to it; the old generation is retired only
 * after every holder confirmed.
 *
 * Rotations reach it as JetStream messages on a durable consumer of its own, which the control
 * plane makes when it sees the registration (in its part's holder stream, see holder-streams.ts
 * in @mesh/shared). The message says which grant moves from k to k+1; the instance fetches k+1
 * sealed to its own xkey, yields it, and acknowledges the message only when the application
 * calls `confirm()`: that JetStream ack is its confirmation, recorded by the server, which
 * refuses an ack from an identity that is not the part's. Until then it tells the server it is
 * still working on it; an instance that was away gets the message again when it is back (the
 * consumer keeps it), and a lost ack is delivered again, not lost.
 */
import { randomBytes } from "node:crypto";
import { JetStreamApiError, jetstream, type JetStreamClient } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import type { Span } from "@opentelemetry/api";
import {
  Buckets,
  ErrorCodes,
  Delivery,
  Grant,
  HOLDER_ACK_WAIT_MS,
  MeshError,
  NAME_RULE,
  RotationBroadcast,
  HOLDER_HEARTBEAT_MS,
  SubjectTemplates,
  createSealingKey,
  decryptForPart,
  parseMasterKey,
  type MasterKey,
  errorMessage,
  grantId,
  holderEndpoint,
  isValidName,
  keys,
  sdkHolderId,
  storeWrite,
  subjects,
  type HolderEndpoint,
  type HolderRegistration,
  backoffMs,
  sleep,
  type CredentialValues,
  mappedEnv,
  type EnvMapping,
  recordJson,
} from "@mesh/shared";
import {
  type contextFrom,
  propagating,
  fetchCredential,
  retryDelayMs,
  holderSpanAttributes,
  startConsumerSpan,
  type NatsConnection,
  OnePull,
  holderPullExpiresMs,
  SETTLING_MS,
  type PulledMessage,
  retryJetStreamIdempotent,
  watchedJson,
} from "@mesh/shared/runtime";

export interface HoldCredentialOptions {
  module: string;
  part: string;
  requirement: string;
  /** The node this instance runs on (the part's node in the manifest). */
  node: string;
  /** This instance's name, unique among the part's instances; default a random `i<hex>`. */
  instance?: string;
  /** How long to wait for the provisioner per fetch; default 5 s. */
  fetchTimeoutMs?: number;
  /** Between registration refreshes; default {@link HOLDER_HEARTBEAT_MS}. */
  heartbeatMs?: number;
  /**
   * Called when the mesh has taken the grant back (no installed part needs it any more: its
   * requirement removed, its module deleted, the part uninstalled): its values no longer work at
   * the provider. The holder then stops (its iteration ends, its registration is removed).
   */
  onWithdrawn?: () => void;
}

/** One generation of the held credential. `values` is secret: never log it. */
export interface HeldCredential {
  grant: string;
  generation: number;
  values: CredentialValues;
  /**
   * The values under the variable names the requirement's `env` maps them to (`{ DATABASE_URL:
   * "postgresql://…" }`), as the grant said when this instance started; empty when it maps none.
   * Secret, as `values`.
   */
  env: Record<string, string>;
  /**
   * The rotation that staged it, when this instance is one of its holders (it must confirm);
   * undefined for the generation held at start, and for one taken from a rotation that started
   * before this instance registered (nothing waits for its confirmation).
   */
  rotation?: string;
  /**
   * Tells the mesh this instance now uses `generation` (call it once the application has
   * switched): acknowledges the rotation's message on the instance's own consumer. Resolves once
   * the ack is handed to the connection; one lost on the way is not a confirmation, so the
   * server delivers the message again after its ack wait and the instance acknowledges it then
   * by itself. Rejects when the connection is closed. A no-op outside a rotation.
   */
  confirm(): Promise<void>;
}

/** A running holder: iterate it with `for await`; `stop()` ends it and removes its registration. */
export interface CredentialHolder extends AsyncIterable<HeldCredential> {
  /** `<node>/<part>/<instance>`. */
  readonly holder: string;
  /** The newest generation this instance has taken: yielded, or waiting in the iteration to be (0 before the first). */
  readonly generation: number;
  stop(): Promise<void>;
}

/**
 * Holds `requirement` of `module` for one instance of `part`. Resolves once registered and
 * subscribed (the first item, the current generation, follows as soon as it is fetched).
 * Throws `InvalidName` for a bad name.
 */
export async function holdCredential(nc: NatsConnection, opts: HoldCredentialOptions): Promise<CredentialHolder> {
  const instance = opts.instance ?? `i${randomBytes(5).toString("hex")}`;
  for (const [what, name] of [
    ["module", opts.module],
    ["part", opts.part],
    ["requirement", opts.requirement],
    ["node", opts.node],
    ["instance", instance],
  ] as const) {
    if (!isValidName(name)) throw new MeshError(ErrorCodes.InvalidName, `${what} ${JSON.stringify(name)} ${NAME_RULE}`);
  }
  const js = jetstream(nc);
  const kvm = new Kvm(js);
  // Direct gets name the key in their subject, so a part's identity may read its own module's records and no other's.
  // A cluster electing leaders, or busy with thousands of instances starting at once, answers late or not at all for a few seconds: waited out.
  const [holders, grants] = await retryJetStreamIdempotent(() => Promise.all([kvm.open(Buckets.holders), kvm.open(Buckets.grants, { allow_direct: true })]));
  const h = new Holder(nc, js, { holders, grants }, { ...opts, instance });
  await h.start();
  return h;
}

class Holder implements CredentialHolder {
  readonly holder: string;
  private readonly grant: string;
  private readonly key = createSealingKey();
  private readonly endpoint: HolderEndpoint;
  private readonly buffer: HeldCredential[] = [];
  private waiter: ((r: IteratorResult<HeldCredential>) => void) | undefined;
  private done = false;
  private taken = 0;
  private heartbeat: NodeJS.Timeout | undefined;
  private withdrawSub: ReturnType<NatsConnection["subscribe"]> | undefined;
  private puller: OnePull | undefined;
  private consuming: Promise<void> | undefined;
  private readonly registeredAt = new Date().toISOString();
  private readonly regKey: string;
  private chain: Promise<void> = Promise.resolve();
  /** The grant's `env` mapping, read at start. */
  private env: EnvMapping | undefined;
  /** The part's rotation key (secret), from the first credential fetched: a rotation's values in its broadcast open with it. */
  private partKey: MasterKey | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly kv: { holders: KV; grants: KV },
    private readonly opts: HoldCredentialOptions & { instance: string },
  ) {
    this.holder = sdkHolderId(opts.node, opts.part, opts.instance);
    this.grant = grantId(opts.module, opts.requirement);
    this.regKey = keys.holder(opts.module, opts.requirement, opts.node, opts.part, opts.instance);
    this.endpoint = holderEndpoint(this.grant, this.holder)!;
  }

  async start(): Promise<void> {
    // The grant taken back from the part: a subject of its own, which carries nothing else (the part may subscribe to its own).
    this.withdrawSub = this.nc.subscribe(subjects.withdrawal(this.opts.node, this.opts.module, this.opts.part, this.opts.requirement), {
      callback: (err, m) => {
        if (err || this.done) return;
        const d = Delivery.safeParse(safeJson(() => m.json()));
        if (!d.success || !d.data.withdraw || d.data.grant !== this.grant) return;
        this.opts.onWithdrawn?.();
        void this.stop();
      },
    });
    // The same registration written again is the same record.
    await retryJetStreamIdempotent(() => this.register());
    this.heartbeat = setInterval(() => void this.register().catch(() => undefined), this.opts.heartbeatMs ?? HOLDER_HEARTBEAT_MS);
    this.heartbeat.unref();
    this.enqueue(() => this.current());
    // The consumer is made by the control plane once it sees the registration: it is looked for until it is there.
    this.consuming = this.consume();
  }

  private register(): Promise<unknown> {
    const r: HolderRegistration = {
      holder: this.holder,
      grant: this.grant,
      node: this.opts.node,
      part: this.opts.part,
      instance: this.opts.instance,
      registeredAt: this.registeredAt,
      seenAt: new Date().toISOString(),
      xkey: this.key.getPublicKey(),
    };
    const data = recordJson(r);
    return storeWrite(this.kv.holders, this.regKey, () => this.kv.holders.put(this.regKey, data), { bytes: data.length, checkRoom: false });
  }

  private enqueue(fn: () => Promise<void>): void {
    this.chain = this.chain.then(fn).catch(() => undefined);
  }

  /**
   * The current generation, at start; looked for again until there is one. A module that
   * declares its requirement and holds it at once starts before the grant is provisioned, and
   * its first generation comes in no rotation: read only once, it would never be yielded.
   */
  private async current(): Promise<void> {
    for (let attempt = 1; !this.done && this.taken === 0; attempt++) {
      const e = await this.kv.grants.get(keys.grant(this.opts.module, this.opts.requirement)).catch(() => null);
      // A grant of a newer format than this SDK reads (a newer control plane's) is waited out like a missing one.
      const g = e && e.operation === "PUT" && e.length ? Grant.safeParse(watchedJson(e, () => undefined)) : undefined;
      if (g?.success) this.env = g.data.env;
      if (g?.success && g.data.generation > 0 && (await this.take(g.data.generation, undefined, new Date()))) return;
      await sleep(backoffMs(attempt, { firstMs: 100, maxMs: 2_000 }));
    }
  }

  /**
   * Consumes the instance's own consumer until it stops: looked for until the control plane has
   * made it, and looked for again should it vanish (its server lost; made again by the rotator,
   * it delivers the last rotation again) or a pull go unanswered.
   *
   * One message per pull, on one inbox for the instance's life (one-pull.ts), not the client's
   * `consume`: a pull lives only on the consumer's leader, and when the leader moves (a server
   * lost, a step-down) its successor answers the pulls it knows of with 409 "Leadership Change",
   * which ends a pull at once but only stalls a `consume` until two heartbeats are missed (30 s
   * with its defaults: on a cluster whose consumer leaders moved, rotations waited 30 s for some
   * of their holders). The next pull leaves with the ack of the message before it. What the pulls
   * cost, and what the short pulls on a new consumer bought (a pull sent before its leader is
   * settled is lost), is in docs/design.md, "Rotation fan-out". How long each pull waits:
   * {@link holderPullExpiresMs} (one-pull.ts).
   */
  private async consume(): Promise<void> {
    const puller = (this.puller = new OnePull(this.nc, this.endpoint.stream, this.endpoint.consumer, (m) => this.enqueue(() => this.rotation(m))));
    for (let attempt = 0; !this.done;) {
      try {
        await this.js.consumers.get(this.endpoint.stream, this.endpoint.consumer);
        const settledAt = Date.now() + SETTLING_MS;
        attempt = 0;
        // Ends when a pull went unanswered (a leader lost, the connection back), the consumer is deleted (lost with its server, say), or at stop: looked for again.
        const end = await puller.run((afterMessage) => holderPullExpiresMs(Date.now(), settledAt, afterMessage));
        if (end === "closed") break;
      } catch (e) {
        if (this.done) break;
        // Not made yet (or gone): looked for again, soon at first.
        const message = errorMessage(e);
        if (!(e instanceof JetStreamApiError) && !/not found|no responders|timeout/i.test(message)) attempt = Math.max(attempt, 4);
      }
      if (this.done) break;
      await sleep(backoffMs(++attempt, { firstMs: 50, maxMs: 2_000 }));
    }
    puller.close();
  }

  /** One rotation's message: k+1 taken and yielded; acknowledged when the application confirms, or at once if this instance has it already. */
  private async rotation(m: PulledMessage): Promise<void> {
    if (this.done) return;
    const b = RotationBroadcast.safeParse(safeJson(() => m.json()));
    if (!b.success || b.data.grant !== this.grant || m.subject !== this.endpoint.subject) {
      m.term();
      return;
    }
    if (b.data.to <= this.taken) {
      m.ack();
      return;
    }
    const { node, part } = this.opts;
    const values = b.data.values && this.partKey ? decryptForPart(this.partKey, b.data, node, part, b.data.values) : undefined;
    const taken = await this.take(b.data.to, b.data.rotation, new Date(), m, values);
    // Not fetched (the provisioner did not answer): the message comes back for another try.
    if (!taken) m.nak(retryDelayMs(m.deliveryCount));
  }

  /** Takes generation `generation`: fetched sealed to this instance, then yielded; `m` is acknowledged by its `confirm()`. False when it could not be fetched. */
  private async take(generation: number, rotation: string | undefined, receivedAt: Date, m?: PulledMessage, inBroadcast?: CredentialValues): Promise<boolean> {
    if (this.done || generation <= this.taken) return true;
    // A CONSUMER span, the child of the rotator's broadcast (its context in the message's headers).
    const { node, part } = this.opts;
    // Without a propagator nothing traces the rotation: no span, and the message's headers are not decoded (a thousand holders pay for each).
    const span: Span | undefined =
      rotation && propagating()
        ? startConsumerSpan(
            "client",
            this.endpoint.subject,
            SubjectTemplates.partRotation,
            holderSpanAttributes({ rotation, grant: this.grant, node, part, holder: this.holder, generation }),
            m?.headers as Parameters<typeof contextFrom>[0],
          )
        : undefined;
    let values: CredentialValues | undefined = inBroadcast;
    span?.setAttribute("mesh.values", values ? "in-broadcast" : "fetched");
    for (let attempt = 0; !this.done && values === undefined; attempt++) {
      try {
        const fetched = await fetchCredential(this.nc, { grant: this.grant, part, node, generation }, this.key, {
          timeoutMs: this.opts.fetchTimeoutMs ?? 5_000,
          partKey: this.partKey === undefined,
        });
        values = fetched.values;
        if (fetched.partKey) this.partKey = parseMasterKey(fetched.partKey);
      } catch (e) {
        if (attempt >= 8 || (e instanceof MeshError && !e.retryable)) {
          span?.setStatus({ code: 2, message: errorMessage(e) });
          span?.end();
          return false;
        }
        await sleep(backoffMs(attempt + 1, { firstMs: 100, maxMs: 5_000 }));
      }
    }
    if (values === undefined || this.done) {
      span?.end();
      return values !== undefined;
    }
    this.taken = generation;
    span?.setAttribute("mesh.received_at", receivedAt.toISOString());
    // Applying may take the application a while: the server is told it is in work, so it does not deliver the message again meanwhile.
    // Not past this instance's stop, nor a newer generation taken (this one is then never confirmed).
    const progress = m
      ? setInterval(() => {
          try {
            if (this.done || this.taken !== generation) throw new Error("superseded");
            m.working();
          } catch {
            clearInterval(progress);
          }
        }, HOLDER_ACK_WAIT_MS / 3)
      : undefined;
    progress?.unref();
    let confirmed: Promise<void> | undefined;
    const confirm = () =>
      (confirmed ??= (async () => {
        clearInterval(progress);
        if (!m) return;
        try {
          // The confirmation, on this instance's own consumer. Not awaited as a request: one
          // lost is no confirmation, so the server delivers the message again after its ack
          // wait, and this instance, which has the generation, acknowledges that one at once.
          m.ack();
        } catch (e) {
          span?.setStatus({ code: 2, message: errorMessage(e) });
          confirmed = undefined;
          throw new MeshError(
            ErrorCodes.Unavailable,
            `could not acknowledge rotation ${rotation} (${errorMessage(e)}); the server delivers it again and it is yielded again to confirm`,
            { retryable: true },
          );
        } finally {
          span?.end();
        }
      })());
    this.push({ grant: this.grant, generation, values, env: mappedEnv(this.env, values).env, ...(rotation ? { rotation } : {}), confirm });
    if (!rotation) span?.end();
    return true;
  }

  private push(u: HeldCredential): void {
    const w = this.waiter;
    if (w) {
      this.waiter = undefined;
      w({ value: u, done: false });
    } else this.buffer.push(u);
  }

  get generation(): number {
    return this.taken;
  }

  async stop(): Promise<void> {
    if (this.done) return;
    this.done = true;
    clearInterval(this.heartbeat);
    this.withdrawSub?.unsubscribe();
    this.puller?.close();
    await this.consuming?.catch(() => undefined);
    this.waiter?.({ value: undefined, done: true });
    this.waiter = undefined;
    // The control plane removes the instance's consumer with its registration.
    await this.kv.holders.delete(this.regKey).catch(() => undefined);
  }

  [Symbol.asyncIterator](): AsyncIterator<HeldCredential> {
    return {
      next: () => {
        const u = this.buffer.shift();
        if (u) return Promise.resolve({ value: u, done: false });
        if (this.done) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => (this.waiter = resolve));
      },
      return: async () => {
        await this.stop();
        return { value: undefined, done: true };
      },
    };
  }
}

function safeJson(f: () => unknown): unknown {
  try {
    return f();
  } catch {
    return undefined;
  }
}
