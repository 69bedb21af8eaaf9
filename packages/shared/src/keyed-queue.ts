/**
 * Work on keys, controller-runtime style: a key is never worked on twice at once, a key
 * added while it is being worked on is worked on once more after, and at most `concurrency`
 * keys are in work together.
 */
export class KeyedQueue {
  private readonly state = new Map<string, { running: boolean; again: Array<Waiter>; now: Array<Waiter> }>();
  private readonly ready: string[] = [];
  private active = 0;

  constructor(
    private readonly worker: (key: string) => Promise<void>,
    private readonly concurrency = 8,
  ) {}

  /** Schedules `key`; the promise settles with the outcome of a run that started after this call. */
  enqueue(key: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = { resolve, reject };
      const s = this.state.get(key);
      if (!s) {
        this.state.set(key, { running: false, again: [], now: [w] });
        this.ready.push(key);
        this.pump();
      } else if (s.running) {
        s.again.push(w);
      } else {
        s.now.push(w);
      }
    });
  }

  /** Keys waiting or in work. */
  get size(): number {
    return this.state.size;
  }

  private pump(): void {
    while (this.active < this.concurrency && this.ready.length) {
      const key = this.ready.shift()!;
      const s = this.state.get(key)!;
      s.running = true;
      this.active++;
      const waiters = s.now;
      s.now = [];
      this.worker(key)
        .then(
          () => waiters.forEach((w) => w.resolve()),
          (e: unknown) => waiters.forEach((w) => w.reject(e)),
        )
        .finally(() => {
          this.active--;
          s.running = false;
          if (s.again.length) {
            s.now = s.again;
            s.again = [];
            this.ready.push(key);
          } else {
            this.state.delete(key);
          }
          this.pump();
        });
    }
  }
}

interface Waiter {
  resolve: () => void;
  reject: (e: unknown) => void;
}
