/**
 * The agent's side of a rotation: after it wrote generation k+1 of a grant for a part, it runs
 * the hook the part's `onRotate` names (one this node allows), proves k+1 logs in from this
 * node; the agent then acknowledges the rotation's message on its own consumer, which is the
 * confirmation the rotator counts.
 */
import {
  BUILTIN_SECRET_PROVIDER,
  ErrorCodes,
  MeshError,
  ModuleDoc,
  ProviderDoc,
  isMeshError,
  type Delivery,
  type Grant,
  type CredentialValues,
} from "@mesh/shared";
import { readJson, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import { createAdapter } from "@mesh/providers";
import type { AllowedHooks } from "@mesh/shared";
import { hookEnvironment, runHook, type HookRunAs } from "./hook-runner.js";

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
 * Finishes applying generation `d.generation` of rotation `d.rotation` for part `d.part` on
 * `node`, whose files are written: the hook the part's `onRotate` names (if any; one `hooks`
 * does not allow runs nothing and throws {@link hookNotAllowed}), then a login with `values`
 * (the delivered k+1) through the provider's adapter. Only when it returns does the agent
 * acknowledge the rotation's message, which is the confirmation. Throws a retryable MeshError
 * when the hook or the login fails: the message is not acknowledged, comes back, and the
 * rotation waits (k keeps working).
 */
export async function applyRotation(opts: {
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
  const adapter = createAdapter(d.kind, {
    name: d.provider,
    node: provider?.node ?? "builtin",
    endpoint: provider?.endpoint ?? "builtin://secret",
    ...(provider?.options ? { options: provider.options } : {}),
  });
  try {
    const login = await adapter.login({ bindings: values });
    if (!login.ok) {
      throw new MeshError(ErrorCodes.ProviderRejected, `generation ${d.generation} of ${d.grant} does not log in from node ${node}: ${login.message}`, {
        retryable: true,
      });
    }
  } finally {
    await adapter.close();
  }
  log.info({ rotation: d.rotation }, "rotation applied: files written, hook run, the new generation logs in from this node; acknowledged next");
}
