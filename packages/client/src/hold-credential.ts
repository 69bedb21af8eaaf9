/**
 * The SDK as a rotation holder: one instance of a module's part holding one grant's credential.
 * It registers itself (KV `mesh-holders`, refreshed while it runs) so a rotation waits for it,
 * yields the current generation and then each rotated one, and the application calls
 * `confirm()` on an update once it has switched to it; the old generation is retired only
 * after every holder confirmed.
 *
 * One message in on the rotation path: the instance registers its public xkey, and the rotator
 * sends it a notice of each rotation on the instance's own subject (which only the rotator may
 * publish to), with the new generation's values sealed to that xkey. A notice whose values do
 * not open for this instance, rotation and generation is applied by fetching them instead.
 *
 * Durable in effect: the rotator tells an instance again while it has not confirmed, and an
 * instance that was disconnected reads the running rotation from KV when it is back, so it
 * never misses one. Its confirmation is one plain message, not a request: the rotator records
 * it, and while the record does not have it the rotator tells the instance again, which sends
 * it again (as it does when it is back from a disconnect and the record still misses it). The
 * rotator drives the retries, paced, instead of every holder of a rotation running its own
 * timers, and a holder's confirmation costs one message instead of a request and its answer.
 */
import { randomBytes } from "node:crypto";
import { jetstream } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/transport-node";
import { Kvm, type KV } from "@nats-io/kv";
import { context, trace, type Span } from "@opentelemetry/api";
import {
  Buckets,
  ErrorCodes,
  Delivery,
  Grant,
  HolderNotice,
  MeshError,
  NAME_RULE,
  ReplyLine,
  Rotation,
  SealedHolderPayload,
  HOLDER_HEARTBEAT_MS,
  SubjectTemplates,
  contextFrom,
  contextOfTraceparent,
  createSealingKey,
  errorMessage,
  fetchCredential,
  grantId,
  isRotationRunning,
  isValidName,
  keys,
  openFrom,
  propagating,
  sdkHolderId,
  sendConfirmation,
  storeWrite,
  subjects,
  holderSpanAttributes,
  startConsumerSpan,
  startProducerSpan,
  type Confirmation,
  type CredentialValues,
  type HolderRegistration,
  type NatsConnection,
} from "@mesh/shared";

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
   * The rotation that staged it, when this instance is one of its holders (it must confirm);
   * undefined for the generation held at start, and for one taken from a rotation that started
   * before this instance registered (nothing waits for its confirmation).
   */
  rotation?: string;
  /**
   * Tells the rotator this instance now uses `generation` (call it once the application has
   * switched). Resolves once the confirmation is handed to the connection; the holder sends it
   * again by itself each time the rotator tells it of the rotation again (it does while its
   * record misses the confirmation: one lost, or sent while no rotator ran) and when it is back
   * from a disconnect with the record still missing it. Rejects when the connection is closed.
   * A refused confirmation (this instance does not hold the grant) is logged by the rotator and
   * listed in the rotation record (`meshctl status`). A no-op outside a rotation.
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
  // Direct gets name the key in their subject, so a part's identity may read its own module's records and no other's.
  const [holders, grants, rotations] = await Promise.all([
    kvm.open(Buckets.holders),
    kvm.open(Buckets.grants, { allow_direct: true }),
    kvm.open(Buckets.rotations, { allow_direct: true }),
  ]);
  const h = new Holder(nc, { holders, grants, rotations }, { ...opts, instance });
  await h.start();
  return h;
}

class Holder implements CredentialHolder {
  readonly holder: string;
  private readonly grant: string;
  private readonly key = createSealingKey();
  /** The mesh's sealing key, learned from the last credential fetched; notices must be sealed by it. */
  private meshSender: string | undefined;
  private readonly buffer: HeldCredential[] = [];
  private waiter: ((r: IteratorResult<HeldCredential>) => void) | undefined;
  private done = false;
  private generation = 0;
  private heartbeat: NodeJS.Timeout | undefined;
  private noticeSub: ReturnType<NatsConnection["subscribe"]> | undefined;
  private withdrawSub: ReturnType<NatsConnection["subscribe"]> | undefined;
  private readonly registeredAt = new Date().toISOString();
  private readonly regKey: string;
  private chain: Promise<void> = Promise.resolve();
  private readonly confirmSubject: string;
  /** The last confirmation sent, to send again while the rotation's record misses it. */
  private confirmation: { c: Confirmation; data: string; headers: MsgHdrs | undefined; recording?: boolean } | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly kv: { holders: KV; grants: KV; rotations: KV },
    private readonly opts: HoldCredentialOptions & { instance: string },
  ) {
    this.holder = sdkHolderId(opts.node, opts.part, opts.instance);
    this.grant = grantId(opts.module, opts.requirement);
    this.regKey = keys.holder(opts.module, opts.requirement, opts.node, opts.part, opts.instance);
    this.confirmSubject = subjects.rotationConfirm(opts.module, opts.requirement, opts.node, opts.part);
  }

  async start(): Promise<void> {
    // Subscribed before registering: a rotation that sees the registration may tell it at once.
    this.noticeSub = this.nc.subscribe(subjects.holderValues(this.opts.module, this.opts.requirement, this.opts.node, this.opts.part, this.opts.instance), {
      callback: (err, m) => {
        if (err || this.done) return;
        const n = HolderNotice.safeParse(safeJson(() => m.json()));
        if (!n.success || n.data.holder !== this.holder || n.data.grant !== this.grant || n.data.generation < this.generation) return;
        // Told again: the rotator has not recorded this instance's confirmation (it is sent
        // again), or the application has not confirmed yet (its confirm() sends it).
        if (n.data.generation === this.generation) return this.confirmAgain(n.data.rotation);
        const receivedAt = new Date();
        // Headers are decoded only for a propagator to read.
        const headers = propagating() ? m.headers : undefined;
        this.enqueue(() => this.take(n.data.generation, n.data.rotation, receivedAt, headers, n.data));
      },
    });
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
    await this.register();
    this.heartbeat = setInterval(() => void this.register().catch(() => undefined), this.opts.heartbeatMs ?? HOLDER_HEARTBEAT_MS);
    this.heartbeat.unref();
    this.enqueue(() => this.catchUp(true));
    // Back after a disconnect: a notice may have gone by; the rotation record says.
    void (async () => {
      for await (const s of this.nc.status()) {
        if (this.done) break;
        if (s.type === "reconnect") this.enqueue(() => this.catchUpAfterReconnect());
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
    const data = JSON.stringify(r);
    return storeWrite(this.kv.holders, this.regKey, () => this.kv.holders.put(this.regKey, data), { bytes: data.length, checkRoom: false });
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
    if (!r?.success || !isRotationRunning(r.data)) return;
    // An instance that registered after the rotation started is not among its holders: it
    // takes the new generation all the same (it works already, and is the one kept), and has
    // nothing to confirm (the rotator would refuse it).
    const mine = Object.hasOwn(r.data.holders, this.holder);
    // Confirmed while away (or while no rotator ran), and not in the record: sent again, as a
    // request this time (a rotator may not be back yet), until one records it.
    if (mine && r.data.to === this.generation && r.data.holders[this.holder]!.c === undefined) void this.confirmUntilRecorded(r.data.id);
    await this.take(r.data.to, mine ? r.data.id : undefined, new Date(), undefined, undefined, r.data.traceparent);
  }

  /** {@link catchUp} after a reconnect, tried again while the server is still recovering JetStream. */
  private async catchUpAfterReconnect(): Promise<void> {
    for (let attempt = 0; !this.done; attempt++) {
      try {
        return await this.catchUp(false);
      } catch (e) {
        // Past this, the rotator's notices still reach the instance while it has not confirmed.
        if (attempt >= 6) throw e;
        await new Promise((r) => setTimeout(r, 250 * 2 ** attempt));
      }
    }
  }

  /**
   * Sends the confirmation of `rotation` again as a request, until a rotator recorded or refused
   * it, the holder stops, or a minute passed (then the rotator's notices, once one runs, ask for it).
   */
  private async confirmUntilRecorded(rotation: string): Promise<void> {
    const c = this.confirmation;
    if (this.done || c?.c.rotation !== rotation || c.recording) return;
    c.recording = true;
    const line = new ReplyLine(this.nc, "rotator");
    try {
      await sendConfirmation(line, c.c, { ...(c.headers ? { headers: c.headers } : {}), budgetMs: 60_000, stopped: () => this.done });
    } catch {
      // Refused (the rotator logged and recorded why), or stopped.
    } finally {
      line.close();
      c.recording = false;
    }
  }

  /** Sends the confirmation of `rotation` again, when the application has confirmed it. */
  private confirmAgain(rotation: string): void {
    const c = this.confirmation;
    if (this.done || c?.c.rotation !== rotation) return;
    try {
      this.nc.publish(this.confirmSubject, c.data, c.headers ? { headers: c.headers } : undefined);
    } catch {
      // The connection is closed: nothing to send on.
    }
  }

  /**
   * The values `notice` sealed to this instance, when they open for it, its rotation and
   * generation, and were sealed by the mesh's sealing key as this instance learned it from a
   * credential it fetched (a reply only the provisioner may send), never from the notice itself:
   * anyone who may publish on the notice subject could seal values of their own to this
   * instance's public xkey. Undefined otherwise (fetch, which the provisioner answers only for a
   * generation that exists).
   */
  private sealedValues(notice: HolderNotice | undefined): CredentialValues | undefined {
    if (!notice?.sealed || !notice.sender || notice.sender !== this.meshSender) return undefined;
    try {
      const p = SealedHolderPayload.safeParse(openFrom(this.key, notice.sender, notice.sealed));
      if (!p.success || p.data.holder !== this.holder || p.data.rotation !== notice.rotation || p.data.generation !== notice.generation) return undefined;
      return p.data.values;
    } catch {
      return undefined; // not sealed to this key: fetch instead
    }
  }

  private async take(
    generation: number,
    rotation: string | undefined,
    receivedAt: Date,
    headers: Parameters<typeof contextFrom>[0],
    notice?: HolderNotice,
    traceparent?: string,
  ): Promise<void> {
    if (this.done || generation <= this.generation) return;
    // A CONSUMER span, the child of the rotator's notice (or, caught up from the record, of the rotation's span).
    const { module, requirement, node, part, instance } = this.opts;
    const span: Span | undefined = rotation
      ? startConsumerSpan(
          "client",
          subjects.holderValues(module, requirement, node, part, instance),
          SubjectTemplates.holderValues,
          holderSpanAttributes({ rotation, grant: this.grant, node, part, holder: this.holder, generation }),
          headers,
          { fallback: contextOfTraceparent(traceparent) },
        )
      : undefined;
    let values: CredentialValues | undefined = this.sealedValues(notice);
    span?.setAttribute("mesh.values", values ? "sealed" : "fetched");
    for (let attempt = 0; !this.done && values === undefined; attempt++) {
      try {
        const fetched = await fetchCredential(this.nc, { grant: this.grant, part: this.opts.part, node: this.opts.node, generation }, this.key, {
          timeoutMs: this.opts.fetchTimeoutMs ?? 5_000,
        });
        values = fetched.values;
        this.meshSender = fetched.sender;
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
          // A PRODUCER span, this holder's span's child, carried to whoever traces the confirmations (kept for re-sends).
          const send = span?.isRecording()
            ? startProducerSpan("client", this.confirmSubject, SubjectTemplates.rotationConfirm, holderSpanAttributes({ rotation, grant: this.grant, node, part, holder: this.holder, generation }), trace.setSpan(context.active(), span))
            : undefined;
          const headers = send?.headers;
          const data = JSON.stringify(c);
          this.confirmation = { c, data, headers };
          try {
            this.nc.publish(this.confirmSubject, data, headers ? { headers } : undefined);
          } finally {
            send?.span.end();
          }
        } catch (e) {
          span?.setStatus({ code: 2, message: errorMessage(e) });
          throw new MeshError(ErrorCodes.Unavailable, `could not send the confirmation of rotation ${rotation} (${errorMessage(e)}); the connection is closed: hold the credential on an open one`, { retryable: false });
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
    this.noticeSub?.unsubscribe();
    this.withdrawSub?.unsubscribe();
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
