/**
 * The SDK as a rotation holder: one instance of a module's part holding one grant's credential.
 * It registers itself (KV `mesh-holders`, refreshed while it runs) so a rotation waits for it,
 * yields the current generation and then each rotated one, and the application calls
 * `confirm()` on an update once it has switched to it; the old generation is retired only
 * after every holder confirmed.
 *
 * Durable in effect: a rotation broadcast arrives live (a subscription on the grant's
 * broadcast subject, which the MESH_ROTATIONS stream also stores), and an instance that was
 * disconnected reads the running rotation from KV when it is back, so it never misses one.
 *
 * No round trip on the rotation path: the instance registers its public xkey, and the rotator
 * seals the new generation's values to it on the instance's own subject just before the
 * broadcast. A broadcast whose values arrived (sealed by the broadcast's sender, for this
 * instance, rotation and generation) is applied from them; otherwise the values are fetched.
 */
import { randomBytes } from "node:crypto";
import { jetstream } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { context, trace, type Span } from "@opentelemetry/api";
import {
  Buckets,
  ErrorCodes,
  Grant,
  MeshError,
  NAME_RULE,
  Rotation,
  RotationBroadcast,
  SealedHolderPayload,
  SealedHolderValues,
  HOLDER_HEARTBEAT_MS,
  contextFrom,
  createSealingKey,
  errorMessage,
  fetchCredential,
  grantId,
  isRotationRunning,
  isValidName,
  keys,
  openFrom,
  sdkHolderId,
  subjects,
  traceHeaders,
  tracer,
  type Confirmation,
  type CredentialValues,
  type HolderRegistration,
  type NatsConnection,
} from "@mesh/shared";
import { StoredPublisher } from "./stored-publisher.js";

/** How long a confirmation waits for JetStream to store it (as `js.publish` would by default). */
const CONFIRM_TIMEOUT_MS = 5_000;

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
}

/** One generation of the held credential. `values` is secret: never log it. */
export interface HeldCredential {
  grant: string;
  generation: number;
  values: CredentialValues;
  /** The rotation that staged it; undefined for the generation held at start. */
  rotation?: string;
  /**
   * Tells the rotator this instance now uses `generation` (call it once the application has
   * switched). Resolves once the confirmation is stored by JetStream. A no-op outside a rotation.
   */
  confirm(): Promise<void>;
}

/** A running holder: iterate it with `for await`; `stop()` ends it and removes its registration. */
export interface CredentialHolder extends AsyncIterable<HeldCredential> {
  /** `<node>/<part>/<instance>`. */
  readonly holder: string;
  stop(): Promise<void>;
}

/**
 * Holds `requirement` of `module` for one instance of `part`. Resolves once registered and
 * subscribed (the first item, the current generation, follows as soon as it is fetched).
 * Throws `InvalidName` for a bad name.
 */
export async function holdCredential(nc: NatsConnection, opts: HoldCredentialOptions): Promise<CredentialHolder> {
  const instance = opts.instance ?? `i${randomBytes(5).toString("hex")}`;
  for (const [what, name] of [["module", opts.module], ["part", opts.part], ["requirement", opts.requirement], ["node", opts.node], ["instance", instance]] as const) {
    if (!isValidName(name)) throw new MeshError(ErrorCodes.InvalidName, `${what} ${JSON.stringify(name)} ${NAME_RULE}`);
  }
  const js = jetstream(nc);
  const kvm = new Kvm(js);
  const [holders, grants, rotations] = await Promise.all([kvm.open(Buckets.holders), kvm.open(Buckets.grants), kvm.open(Buckets.rotations)]);
  const h = new Holder(nc, { holders, grants, rotations }, { ...opts, instance });
  await h.start();
  return h;
}

class Holder implements CredentialHolder {
  readonly holder: string;
  private readonly grant: string;
  private readonly key = createSealingKey();
  private readonly buffer: HeldCredential[] = [];
  private waiter: ((r: IteratorResult<HeldCredential>) => void) | undefined;
  private done = false;
  private generation = 0;
  private heartbeat: NodeJS.Timeout | undefined;
  private sub: ReturnType<NatsConnection["subscribe"]> | undefined;
  private valuesSub: ReturnType<NatsConnection["subscribe"]> | undefined;
  /** Sealed values received for rotations, by `<rotation> <sender>`, until their broadcast takes them (newest few kept). */
  private readonly sealed = new Map<string, SealedHolderValues>();
  private readonly registeredAt = new Date().toISOString();
  private readonly regKey: string;
  private chain: Promise<void> = Promise.resolve();
  private readonly confirmations: StoredPublisher;

  constructor(
    private readonly nc: NatsConnection,
    private readonly kv: { holders: KV; grants: KV; rotations: KV },
    private readonly opts: HoldCredentialOptions & { instance: string },
  ) {
    this.holder = sdkHolderId(opts.node, opts.part, opts.instance);
    this.grant = grantId(opts.module, opts.requirement);
    this.regKey = keys.holder(opts.module, opts.requirement, opts.node, opts.part, opts.instance);
    this.confirmations = new StoredPublisher(nc, CONFIRM_TIMEOUT_MS);
  }

  async start(): Promise<void> {
    // Subscribed before registering: a rotation that sees the registration may seal to it at once.
    this.valuesSub = this.nc.subscribe(subjects.holderValues(this.opts.module, this.opts.requirement, this.opts.node, this.opts.part, this.opts.instance), {
      callback: (err, m) => {
        if (err || this.done) return;
        const v = SealedHolderValues.safeParse(safeJson(() => m.json()));
        if (!v.success || v.data.holder !== this.holder || v.data.grant !== this.grant) return;
        if (this.sealed.size >= 8) this.sealed.delete(this.sealed.keys().next().value!);
        this.sealed.set(`${v.data.rotation} ${v.data.sender}`, v.data);
      },
    });
    await this.register();
    this.heartbeat = setInterval(() => void this.register().catch(() => undefined), this.opts.heartbeatMs ?? HOLDER_HEARTBEAT_MS);
    this.heartbeat.unref();
    this.sub = this.nc.subscribe(subjects.rotationBroadcast(this.opts.module, this.opts.requirement), {
      callback: (err, m) => {
        if (err || this.done) return;
        const b = RotationBroadcast.safeParse(safeJson(() => m.json()));
        if (b.success && b.data.grant === this.grant) this.enqueue(() => this.take(b.data.to, b.data.rotation, new Date(), m.headers, b.data.sender));
      },
    });
    this.enqueue(() => this.catchUp(true));
    // Back after a disconnect: a broadcast may have gone by; the rotation record says.
    void (async () => {
      for await (const s of this.nc.status()) {
        if (this.done) break;
        if (s.type === "reconnect") this.enqueue(() => this.catchUp(false));
      }
    })().catch(() => undefined);
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
    return this.kv.holders.put(this.regKey, JSON.stringify(r));
  }

  private enqueue(fn: () => Promise<void>): void {
    this.chain = this.chain.then(fn).catch(() => undefined);
  }

  /** The current generation (at start), then the staged one of a running rotation. */
  private async catchUp(initial: boolean): Promise<void> {
    if (initial) {
      const e = await this.kv.grants.get(keys.grant(this.opts.module, this.opts.requirement));
      const g = e && e.operation === "PUT" && e.length ? Grant.safeParse(e.json()) : undefined;
      if (g?.success && g.data.generation > 0) await this.take(g.data.generation, undefined, new Date(), undefined);
    }
    const e = await this.kv.rotations.get(keys.grant(this.opts.module, this.opts.requirement));
    const r = e && e.operation === "PUT" && e.length ? Rotation.safeParse(e.json()) : undefined;
    if (r?.success && isRotationRunning(r.data)) await this.take(r.data.to, r.data.id, new Date(), undefined);
  }

  /**
   * The values sealed to this instance for `rotation` by `sender` (the broadcast's), when they
   * arrived and open to this instance, rotation and generation; undefined otherwise (fetch).
   */
  private sealedValues(rotation: string | undefined, generation: number, sender: string | undefined): CredentialValues | undefined {
    if (!rotation || !sender) return undefined;
    const k = `${rotation} ${sender}`;
    const m = this.sealed.get(k);
    this.sealed.delete(k);
    if (!m || m.sender !== sender || m.rotation !== rotation || m.generation !== generation) return undefined;
    try {
      const p = SealedHolderPayload.safeParse(openFrom(this.key, sender, m.sealed));
      if (!p.success || p.data.holder !== this.holder || p.data.rotation !== rotation || p.data.generation !== generation) return undefined;
      return p.data.values;
    } catch {
      return undefined; // not sealed to this key by that sender: fetch instead
    }
  }

  private async take(generation: number, rotation: string | undefined, receivedAt: Date, headers: Parameters<typeof contextFrom>[0], sender?: string): Promise<void> {
    if (this.done || generation <= this.generation) return;
    const span: Span | undefined = rotation
      ? tracer("client").startSpan("rotation.hold", { attributes: { "mesh.rotation": rotation, "mesh.holder": this.holder, "mesh.generation": generation } }, contextFrom(headers))
      : undefined;
    let values: CredentialValues | undefined = this.sealedValues(rotation, generation, sender);
    span?.setAttribute("mesh.values", values ? "sealed" : "fetched");
    for (let attempt = 0; !this.done && values === undefined; attempt++) {
      try {
        values = (
          await fetchCredential(this.nc, { grant: this.grant, part: this.opts.part, node: this.opts.node, generation }, this.key, {
            timeoutMs: this.opts.fetchTimeoutMs ?? 5_000,
          })
        ).values;
      } catch (e) {
        if (attempt >= 8 || (e instanceof MeshError && !e.retryable)) {
          span?.setStatus({ code: 2, message: errorMessage(e) });
          span?.end();
          return;
        }
        await new Promise((r) => setTimeout(r, Math.min(5_000, 100 * 2 ** attempt)));
      }
    }
    if (values === undefined || this.done) return span?.end();
    this.generation = generation;
    let confirmed: Promise<void> | undefined;
    const confirm = () =>
      (confirmed ??= (async () => {
        if (!rotation) return;
        const c: Confirmation = {
          rotation,
          grant: this.grant,
          holder: this.holder,
          generation,
          receivedAt: receivedAt.toISOString(),
          appliedAt: new Date().toISOString(),
          confirmedAt: new Date().toISOString(),
        };
        try {
          // Carries this holder's span, the rotation's child, to whoever traces the confirmations.
          const headers = traceHeaders(span ? trace.setSpan(context.active(), span) : context.active());
          await this.confirmations.publish(subjects.rotationConfirm(this.opts.module, this.opts.requirement), JSON.stringify(c), headers, `${rotation}:${this.holder}`);
        } finally {
          span?.end();
        }
      })());
    this.push({ grant: this.grant, generation, values, ...(rotation ? { rotation } : {}), confirm });
  }

  private push(u: HeldCredential): void {
    const w = this.waiter;
    if (w) {
      this.waiter = undefined;
      w({ value: u, done: false });
    } else this.buffer.push(u);
  }

  async stop(): Promise<void> {
    if (this.done) return;
    this.done = true;
    clearInterval(this.heartbeat);
    this.sub?.unsubscribe();
    this.valuesSub?.unsubscribe();
    this.sealed.clear();
    this.confirmations.close();
    this.waiter?.({ value: undefined, done: true });
    this.waiter = undefined;
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
