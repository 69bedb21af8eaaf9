/**
 * The agent's side of a rotation: after it wrote generation k+1 of a grant for a part, it runs
 * the hook the part's `onRotate` names (one this node allows), proves k+1 logs in from this
 * node, and confirms to the rotator
 * (a request carrying its holder id, the grant and the generation, answered once recorded).
 */
import {
  BUILTIN_SECRET_PROVIDER,
  ErrorCodes,
  MeshError,
  ModuleDoc,
  ProviderDoc,
  Reasons,
  ReplyLine,
  getCondition,
  holderKey,
  isMeshError,
  readJson,
  sendConfirmation,
  setCondition,
  SubjectTemplates,
  holderSpanAttributes,
  subjects,
  withProducerSpan,
  type Confirmation,
  type CredentialValues,
  type Delivery,
  type Grant,
  type Logger,
  type Store,
} from "@mesh/shared";
import { context } from "@opentelemetry/api";
import { createAdapter } from "@mesh/providers";
import type { AllowedHooks } from "./allowed-hooks.js";
import { hookEnvironment, runHook, type HookRunAs } from "./hook-runner.js";

/** How long a confirmation is sent again while no rotator answers, before the Delivery comes back. */
export const CONFIRM_BUDGET_MS = 30_000;

/**
 * True when `d` stages a generation of a running rotation that the grant has not committed yet:
 * the holder must confirm it (again, if it did before a crash: confirmations are idempotent).
 */
export function isRotationDue(d: Delivery, grant: Grant | undefined): boolean {
  return d.rotation !== undefined && grant !== undefined && d.generation > grant.generation;
}

/** The hooks of a node's agent, and who they run as (see hook-runner.ts). */
export interface AgentHooks {
  allowed: AllowedHooks;
  runAs: HookRunAs;
}

/**
 * The refusal of a hook this node does not allow: which hook, which node, how to allow it. A
 * retryable MeshError `HookNotAllowed`: the Delivery comes back, so the rotation confirms by
 * itself once the agent is started with the hook.
 */
export function hookNotAllowed(hook: string, node: string, d: Pick<Delivery, "generation">, allowed: AllowedHooks): MeshError {
  const names = [...allowed.keys()].sort();
  return new MeshError(
    ErrorCodes.HookNotAllowed,
    `the part's onRotate names hook ${JSON.stringify(hook)}, which the agent of node ${node} does not allow (it allows ${names.length ? names.join(", ") : "none"}), ` +
      `so nothing ran and generation ${d.generation} is not confirmed (the one before keeps working): start that agent with --allow-hook ${hook}=COMMAND ` +
      `(or MESH_ALLOW_HOOKS, or meshctl up --allow-hook ${hook}=COMMAND), or name a hook it allows in the part's onRotate`,
    { retryable: true },
  );
}

/** True for a failure of a part's hook (not allowed, or failed): one the agent records on the grant while it retries. */
export function isHookError(e: unknown): e is MeshError {
  return isMeshError(e, ErrorCodes.HookNotAllowed) || isMeshError(e, ErrorCodes.HookFailed);
}

/**
 * Confirms generation `d.generation` of rotation `d.rotation` for part `d.part` on `node`: the
 * hook the part's `onRotate` names (if any; one `hooks` does not allow runs nothing and throws
 * {@link hookNotAllowed}), then a login with `values` (the delivered k+1) through the
 * provider's adapter, then the confirmation, sent until the rotator recorded it (for up to
 * {@link CONFIRM_BUDGET_MS}). Throws a retryable MeshError when the hook or the login fails,
 * or no rotator answered, so the Delivery comes back and the rotation waits (k keeps working);
 * a refused confirmation is logged, as there is nothing to do again.
 */
export async function confirmRotation(opts: {
  store: Store;
  node: string;
  delivery: Delivery;
  values: CredentialValues;
  bindingPath: string;
  receivedAt: Date;
  hooks: AgentHooks;
  log: Logger;
}): Promise<void> {
  const { store, node, delivery: d, values, log } = opts;
  const doc = (await readJson(store.kv.manifests, d.module, ModuleDoc))?.value;
  const hook = doc?.parts.find((p) => p.name === d.part)?.onRotate;
  if (hook) {
    const argv = opts.hooks.allowed.get(hook);
    if (!argv) throw hookNotAllowed(hook, node, d, opts.hooks.allowed);
    await runHook({ name: hook, argv }, hookEnvironment(d, opts.bindingPath), { runAs: opts.hooks.runAs, log });
    log.info({ hook }, "the part's onRotate hook ran");
  }
  const provider = d.provider === BUILTIN_SECRET_PROVIDER ? undefined : (await readJson(store.kv.providers, d.provider, ProviderDoc))?.value;
  // With the document's options, as the prober makes it: a kind may need one to log in (oci.registry's issuerUrl).
  const adapter = createAdapter(d.kind, { name: d.provider, node: provider?.node ?? "builtin", endpoint: provider?.endpoint ?? "builtin://secret", ...(provider?.options ? { options: provider.options } : {}) });
  try {
    const login = await adapter.login({ bindings: values });
    if (!login.ok) {
      throw new MeshError(ErrorCodes.ProviderRejected, `generation ${d.generation} of ${d.grant} does not log in from node ${node}: ${login.message}`, { retryable: true });
    }
  } finally {
    await adapter.close();
  }
  const appliedAt = new Date();
  const c: Confirmation = {
    rotation: d.rotation!,
    grant: d.grant,
    holder: holderKey(node, d.part),
    generation: d.generation,
    receivedAt: opts.receivedAt.toISOString(),
    appliedAt: appliedAt.toISOString(),
    confirmedAt: new Date().toISOString(),
  };
  const line = new ReplyLine(store.nc, "rotator");
  try {
    // A PRODUCER span, the child of this delivery's (active) span.
    const subject = subjects.rotationConfirm(d.module, d.requirement, node, d.part);
    const attributes = holderSpanAttributes({ rotation: c.rotation, grant: c.grant, node, part: d.part, holder: c.holder, generation: c.generation });
    await withProducerSpan("agent", subject, SubjectTemplates.rotationConfirm, attributes, context.active(), (headers) =>
      sendConfirmation(line, c, { headers, budgetMs: CONFIRM_BUDGET_MS }),
    );
  } catch (e) {
    if (isMeshError(e) && !e.retryable) {
      log.warn({ rotation: d.rotation, err: e }, "the rotator refused the confirmation; nothing to confirm again");
      return;
    }
    throw e;
  } finally {
    line.close();
  }
  log.info({ rotation: d.rotation }, "rotation confirmed");
}
