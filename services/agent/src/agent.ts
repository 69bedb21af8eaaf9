/**
 * The node agent: the holder of credentials for the parts placed on its node. It consumes the
 * deliveries for its node durably, fetches each delivered generation sealed to its own xkey,
 * writes the binding files atomically, and records what it did in its own node's receipts
 * (the provisioner folds them into the grant; the agent may write no grant).
 */
import { hostname } from "node:os";
import {
  Delivery,
  DeliveryReceipt,
  RotationBroadcast,
  agentDurable,
  bindingNameOf,
  ErrorCodes,
  Grant,
  MeshError,
  NAME_RULE,
  Streams,
  createSealingKey,
  envDigest,
  errorMessage,
  grantId,
  isMeshError,
  isTarget,
  isValidName,
  keys,
  subjects,
  SubjectTemplates,
  type NodeRecord,
  type CredentialValues,
  recordJson,
} from "@mesh/shared";
import {
  consumeMessages,
  fetchCredential,
  mutateJson,
  readJson,
  holderSpanAttributes,
  traceHeaders,
  withConsumerSpan,
  type Disposition,
  type JsMsg,
} from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import type { AgentOptions } from "./agent-options.js";
import {
  DEFAULT_GRACE_MS,
  bindingGeneration,
  bindingPath,
  migrateBindings,
  pruneBinding,
  removeBinding,
  setBindingEnv,
  writeFetchedBinding,
  type PartBinding,
  type PartEnvResult,
} from "./bindings-writer.js";
import { applyRotation, isHookError, isRotationDue, type AgentHooks } from "./rotation-confirm.js";
import { consumeRotations } from "./rotations.js";
import { planDelivery } from "./delivery-plan.js";
import { receiptConfirmed, receiptDelivered, receiptFailed, receiptHookFailed, receiptWithdrawn } from "./receipts.js";
import { DEFAULT_HOOK_USER, decideHookRunAs, resolveHookPrograms } from "./hook-runner.js";
import { HookOptionError } from "@mesh/shared";
import { startProber } from "./prober.js";
import { restoreLostBindings } from "./restore.js";

/** A running agent. */
export interface Agent {
  /** Stops consuming, waits for the delivery in work to be settled, removes replaced files. Idempotent. */
  stop(): Promise<void>;
  /** Settles when the agent has stopped (rejects if its consumer failed). */
  closed: Promise<void>;
}

/** The durable consumer name of a node's agent (defined with its permissions in @mesh/shared). */
export { agentDurable };

/**
 * Starts the agent of `node`: registers the node in KV `nodes` (refreshing `seenAt`), and
 * delivers every credential published for the parts on this node, including those published
 * while it was not running. Deliveries of one grant to one part are applied in order and
 * never move a holder back to an older generation. Values are never logged. A part's
 * `onRotate` runs only a hook of `opts.hooks` (see hook-runner.ts for how).
 *
 * Throws `InvalidName` for a node name that is not a valid name, and `InvalidRequest` for a
 * hook whose program is not on this node or a hook user this node does not have.
 */
export async function startAgent(opts: AgentOptions): Promise<Agent> {
  const { store, node, bindingsRoot } = opts;
  if (!isValidName(node)) throw new MeshError(ErrorCodes.InvalidName, `node name ${JSON.stringify(node)} ${NAME_RULE}`);
  const log = opts.log.child({ node });
  const graceMs = opts.graceMs ?? DEFAULT_GRACE_MS;
  const key = createSealingKey();
  const hooks = startHooks(opts, log);

  const startedAt = new Date().toISOString();
  const nodeRecord = (): NodeRecord => ({
    node,
    agent: `${hostname()}/${process.pid}`,
    bindingsRoot,
    startedAt,
    seenAt: new Date().toISOString(),
  });
  await store.kv.nodes.put(node, recordJson(nodeRecord()));
  const heartbeat = setInterval(() => {
    store.kv.nodes.put(node, recordJson(nodeRecord())).catch((e: unknown) => log.warn({ err: e }, "could not refresh the node record"));
  }, opts.heartbeatMs ?? 10_000);
  heartbeat.unref();

  // Replaced generations' directories, removed once their grace has passed.
  const prunes = new Map<string, { timer: NodeJS.Timeout; run: (graceMs: number) => void }>();
  const schedulePrune = (b: PartBinding) => {
    const id = `${b.module}/${b.part}/${b.binding}`;
    clearTimeout(prunes.get(id)?.timer);
    const run = (grace: number) => {
      prunes.delete(id);
      try {
        pruneBinding(bindingsRoot, b.module, b.part, b.binding, { graceMs: grace });
      } catch (e) {
        log.warn({ module: b.module, part: b.part, binding: b.binding, err: e }, "could not remove replaced binding files");
      }
    };
    const timer = setTimeout(() => run(graceMs), graceMs + 50);
    timer.unref();
    prunes.set(id, { timer, run });
  };

  // A root written by an agent before the generations directory: moved over before anything reads or writes it.
  const migration = migrateBindings(bindingsRoot, { graceMs });
  if (migration.migrated.length) {
    const parts = [...new Set(migration.migrated.map((b) => `${b.module}/${b.part}`))];
    log.warn(
      { bindings: migration.migrated.map((b) => `${b.module}/${b.part}/${b.binding}`) },
      `moved the bindings of ${parts.join(", ")} to the current layout: each part's directory now holds only its bindings (use it as SERVICE_BINDING_ROOT), its env file is <module>/<part>.env beside it (part.env inside it is gone; point EnvironmentFile= there)`,
    );
  }
  for (const b of migration.retained) schedulePrune(b);

  const deliver = async (m: JsMsg): Promise<Disposition> => {
    let d: Delivery;
    try {
      d = Delivery.parse(m.json());
    } catch {
      log.error({ subject: m.subject, seq: m.seq }, "a message on the delivery stream is not a Delivery; dropped");
      return "term";
    }
    const names = [d.node, d.module, d.part, d.requirement];
    if (
      !names.every(isValidName) ||
      d.node !== node ||
      d.grant !== grantId(d.module, d.requirement) ||
      m.subject !== subjects.delivery(d.node, d.module, d.part, d.requirement)
    ) {
      log.error({ subject: m.subject, grant: d.grant, part: d.part }, "a Delivery does not match its subject; dropped");
      return "term";
    }
    return apply(d, m, SubjectTemplates.delivery);
  };

  /**
   * A rotation's message on one of this agent's consumers (holder-streams.ts): applied as the
   * delivery of k+1 to the part the consumer is for, and acknowledged (the confirmation) only
   * once the files are written, the hook ran and k+1 logs in.
   */
  const rotate =
    (part: string) =>
    async (m: JsMsg): Promise<Disposition> => {
      const b = RotationBroadcast.safeParse(safeJson(() => m.json()));
      if (
        !b.success ||
        b.data.grant !== grantId(b.data.module, b.data.requirement) ||
        m.subject !== subjects.agentRotation(node, b.data.module, b.data.requirement, part)
      ) {
        log.error({ subject: m.subject, seq: m.seq }, "a message on this node's rotation stream is not a rotation of its consumer's grant; dropped");
        return "term";
      }
      const r = b.data;
      const d: Delivery = {
        grant: r.grant,
        module: r.module,
        requirement: r.requirement,
        part,
        node,
        kind: r.kind,
        provider: r.provider,
        generation: r.to,
        publishedAt: r.publishedAt,
        rotation: r.rotation,
      };
      return apply(d, m, SubjectTemplates.agentRotation);
    };

  /** Applies Delivery `d` (from a delivery or a rotation message `m`): what to ack, retry or drop. */
  const apply = async (d: Delivery, m: JsMsg, template: string): Promise<Disposition> => {
    const receivedAt = new Date();
    const receiptKey = keys.receipt(node, d.module, d.requirement, d.part);
    const receipt = (fn: (r: DeliveryReceipt | undefined) => DeliveryReceipt | undefined) => mutateJson(store.kv.receipts, receiptKey, DeliveryReceipt, fn);
    const dlog = log.child({ grant: d.grant, part: d.part, generation: d.generation, ...(d.rotation ? { rotation: d.rotation } : {}) });
    const attributes = holderSpanAttributes({
      ...(d.rotation ? { rotation: d.rotation } : {}),
      grant: d.grant,
      node,
      part: d.part,
      holder: `${node}/${d.part}`,
      generation: d.generation,
    });
    return withConsumerSpan(
      "agent",
      m.subject,
      template,
      attributes,
      m.headers,
      async (span) => {
        /** Generation `d.generation` is in the part's binding and no receipt says so yet. */
        let written = false;
        /** The fingerprint of the `env` mapping the part's env file is written with: the grant's. */
        let envFingerprint = "";
        try {
          const grant = await readJson(store.kv.grants, keys.grant(d.module, d.requirement), Grant);
          const binding = bindingNameOf(d.part, d.requirement);
          // The names the part's env file gives the values besides REQUIREMENT_KEY, as the grant says now.
          const env = grant?.value.env;
          envFingerprint = envDigest(env);
          if (d.withdraw) {
            // The part no longer needs the grant: its binding goes (unless it is a target again by now).
            if (grant && isTarget(grant.value, node, d.part)) {
              dlog.info("withdrawal ignored: the part is a target of the grant again");
              return "ack";
            }
            const { removed } = removeBinding(bindingsRoot, d.module, d.part, binding);
            await receipt(() => receiptWithdrawn(new Date()));
            dlog.info(
              { removed, path: bindingPath(bindingsRoot, d.module, d.part, binding) },
              removed ? "binding removed: the part no longer needs the grant" : "nothing to remove: the part held no binding of the grant",
            );
            return "ack";
          }
          const local = bindingGeneration(bindingsRoot, d.module, d.part, binding);
          const plan = planDelivery(d, grant?.value, local);
          span.setAttribute("mesh.plan", plan.action);
          if (plan.action === "ignore") {
            dlog.info({ reason: plan.reason }, "delivery ignored");
            return "ack";
          }
          const rotationDue = isRotationDue(d, grant?.value);
          if (plan.action === "skip" && !rotationDue) {
            dlog.debug({ reason: plan.reason }, "delivery skipped");
            return "ack";
          }
          let values: CredentialValues | undefined;
          if (plan.action === "apply") {
            const fetched = await fetchCredential(store.nc, { grant: d.grant, part: d.part, node, generation: d.generation }, key, {
              timeoutMs: opts.fetchTimeoutMs ?? 5_000,
              headers: traceHeaders(),
            });
            // Planned before the fetch, which waited on the network: a rotation's broadcast, handled meanwhile by this agent's
            // other consumer, may have written the grant's next generation. Planned again, with no await between this look at
            // the disk and the write, so that an older Delivery never writes over it.
            if (!rotationDue) {
              const again = planDelivery(d, grant?.value, bindingGeneration(bindingsRoot, d.module, d.part, binding));
              if (again.action === "skip" || again.action === "ignore") {
                dlog.info({ reason: again.reason }, "delivery skipped: the binding changed while it was fetched");
                return "ack";
              }
            }
            const written = writeFetchedBinding(bindingsRoot, { module: d.module, part: d.part, binding }, fetched, env, graceMs);
            if (written.retained) schedulePrune({ module: d.module, part: d.part, binding });
            warnOfEnv(dlog, written);
            dlog.info({ path: written.path, keys: Object.keys(fetched.values).sort(), changed: written.changed }, "binding written");
            values = fetched.values;
          } else if (plan.action === "record") {
            // In place already: the env file is written again for the grant's env, which may be what changed.
            const set = setBindingEnv(bindingsRoot, d.module, d.part, binding, env);
            if (set) warnOfEnv(dlog, set);
          }
          // In a rotation, what was written is recorded with the confirmation (one write), or with the failure.
          written = plan.action !== "skip";
          if (written && !rotationDue) {
            await receipt((r) => receiptDelivered(r, d.generation, new Date(), envFingerprint));
            written = false;
            dlog.info("delivery recorded");
          }
          if (rotationDue) {
            // Written before a crash: fetch the values again to prove them.
            values ??= (
              await fetchCredential(store.nc, { grant: d.grant, part: d.part, node, generation: d.generation }, key, {
                timeoutMs: opts.fetchTimeoutMs ?? 5_000,
              })
            ).values;
            await applyRotation({
              store,
              node,
              delivery: d,
              values,
              bindingPath: bindingPath(bindingsRoot, d.module, d.part, binding),
              receivedAt,
              hooks,
              log: dlog,
            });
            // The receipt's witness of the confirmation, before the ack (a hook failure it said in this rotation is over).
            await receipt((r) => receiptConfirmed(written ? receiptDelivered(r, d.generation, new Date(), envFingerprint) : r, d.rotation!, d.generation));
            written = false;
            dlog.info("delivery and confirmation recorded");
          }
          prober.probeSoon(d.module, d.part, d.requirement);
          // The control plane makes this holder's consumer once the receipt says it holds the grant.
          if (!d.rotation) rotations.lookSoon();
          return "ack";
        } catch (e) {
          const retryable = !isMeshError(e) || e.retryable;
          span.setStatus({ code: 2, message: errorMessage(e) });
          // The binding holds what was written, though the rotation is not confirmed: the receipt says so.
          const held = (r: DeliveryReceipt | undefined) => (written ? receiptDelivered(r, d.generation, new Date(), envFingerprint) : r);
          if (isHookError(e)) {
            // The operator must act on this node: shown on the grant (meshctl status) through the node's receipt, and tried again, so the rotation confirms by itself once fixed.
            dlog.warn({ err: e, attempt: m.info.deliveryCount }, "the part's onRotate hook did not run through; the confirmation waits and is tried again");
            await receipt((r) => receiptHookFailed(held(r), d.rotation!, d.generation, e, new Date())).catch((e2: unknown) =>
              dlog.warn({ err: e2 }, "could not record the hook's failure in the node's receipt"),
            );
            return "retry";
          }
          if (written) await receipt(held).catch((e2: unknown) => dlog.warn({ err: e2 }, "could not record the delivery in the node's receipt"));
          if (retryable) {
            dlog.warn({ err: e, attempt: m.info.deliveryCount }, "delivery failed; it is retried");
            return "retry";
          }
          dlog.error(
            { err: e, code: (e as MeshError).code },
            "delivery failed and cannot succeed as things are; recorded in the node's receipt, so the grant shows it",
          );
          await receipt((r) => receiptFailed(r, d.generation, errorMessage(e), new Date())).catch((e2: unknown) =>
            dlog.warn({ err: e2 }, "could not record the failure in the node's receipt"),
          );
          return "term";
        }
      },
      { consumerGroup: agentDurable(node) },
    );
  };

  // Before consuming: a delivery asks it to probe the new binding.
  // What this node's receipts say it holds and its bindings root lost is written again, now and before every probe round.
  const restore = () =>
    restoreLostBindings({
      store,
      node,
      bindingsRoot,
      key,
      graceMs,
      ...(opts.fetchTimeoutMs ? { fetchTimeoutMs: opts.fetchTimeoutMs } : {}),
      log,
      onWritten: (b, written) => {
        if (written.retained) schedulePrune(b);
        warnOfEnv(log, written);
      },
    });
  const prober = startProber({ store, node, bindingsRoot, log, beforeRound: restore, ...(opts.probeIntervalMs ? { intervalMs: opts.probeIntervalMs } : {}) });
  // The rotations of what this node holds, each on its own consumer (made by the control plane).
  const rotations = consumeRotations({ store, node, log, handle: rotate });
  const consumption = await consumeMessages({
    store,
    stream: Streams.deliveries,
    durable: agentDurable(node),
    filter: subjects.deliveriesForNode(node),
    handle: deliver,
    log,
  });
  log.info({ bindingsRoot }, `agent for node ${node} writing under ${bindingsRoot}`);

  let stopping: Promise<void> | undefined;
  return {
    stop() {
      stopping ??= (async () => {
        clearInterval(heartbeat);
        await prober.stop();
        await rotations.stop();
        await consumption.stop();
        for (const p of [...prunes.values()]) {
          clearTimeout(p.timer);
          // Stopping: leave no replaced values behind until some later write.
          p.run(0);
        }
        log.info("agent stopped");
      })();
      return stopping;
    },
    closed: consumption.closed,
  };
}

function safeJson(f: () => unknown): unknown {
  try {
    return f();
  } catch {
    return undefined;
  }
}

/**
 * The agent's hooks, checked once at start: every program exists here, and who they run as
 * (`opts.hookUser`, default `nobody`; the agent's own user when it is not root, said once).
 */
function startHooks(opts: AgentOptions, log: Logger): AgentHooks {
  const allowed = opts.hooks ?? new Map<string, string[]>();
  if (allowed.size === 0) return { allowed, runAs: undefined };
  try {
    const resolved = resolveHookPrograms(allowed);
    const { runAs, warning } = decideHookRunAs(opts.hookUser ?? DEFAULT_HOOK_USER, process.getuid?.() ?? -1);
    if (warning) log.warn(warning);
    log.info(
      { hooks: Object.fromEntries([...resolved].map(([n, argv]) => [n, argv.join(" ")])), runAs: runAs?.user ?? "the agent's user" },
      `hooks allowed on this node: ${[...resolved.keys()].join(", ")}`,
    );
    return { allowed: resolved, runAs };
  } catch (e) {
    if (e instanceof HookOptionError) throw new MeshError(ErrorCodes.InvalidRequest, e.message, { cause: e });
    throw e;
  }
}

/** Says in the log what the part's env file could not give as asked: names produced twice, mapped keys the binding lacks. */
function warnOfEnv(log: Logger, r: PartEnvResult): void {
  if (r.envCollisions.length) log.warn({ names: r.envCollisions, envFile: r.envFile }, "some env names are produced twice; the first is kept");
  if (r.envUnmapped.length) {
    log.warn(
      { names: r.envUnmapped, envFile: r.envFile },
      "the requirement's env names keys its binding does not carry; those variables are not in the env file",
    );
  }
}
