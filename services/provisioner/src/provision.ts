/**
 * Reconciling one grant: make its resource exist with a credential, record it, and announce
 * the generation to every target that does not hold it yet. Level-triggered: it reads the
 * grant and acts on what it says, whatever event woke it.
 */
import {
  BUILTIN_SECRET_PROVIDER,
  ErrorCodes,
  Grant,
  MeshError,
  ProviderDoc,
  errorMessage,
  isMeshError,
  isTrue,
  setCondition,
  subjects,
  isUnneeded,
  pendingWithdrawals,
  deliveryMsgId,
  undelivered,
  withDeliveredCondition,
  type Delivery,
} from "@mesh/shared";
import { mutateJson, readJson, recordProvisioning, traceHeaders, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import { recordedResource, withAdminSecret, type ProviderAdapter } from "@mesh/providers";
import { takeBack } from "./take-back.js";
import { PROVISIONER_INSTANCE, type ProvisionDeps } from "./provision-deps.js";

/** Who repairs a provider's admin secret, in the secret grant's repair history. */

/**
 * The generation a grant should be provisioned at, or undefined when there is nothing for the
 * provisioner to do. A provisioned grant that moved to another provider is the rotator's: it
 * hands the grant over (k+1 on the new provider, every holder confirms, then k is retired on the
 * old one), so no holder is cut off; one that never worked anywhere is simply made there.
 */
export function targetGeneration(g: Grant): number | undefined {
  if (g.generation === 0) return 1;
  // Taken back, and needed again: a fresh credential, on what was kept of the resource.
  if (g.revoked && g.revoked.generation >= g.generation) return g.generation + 1;
  const moved = g.resource.provider !== undefined && g.resource.provider !== g.provider;
  if (moved) return isTrue(g.conditions, "Provisioned") ? undefined : g.generation + 1;
  if (!isTrue(g.conditions, "Provisioned")) return g.generation; // retry the same generation
  return undefined;
}

/** Reconciles the grant stored under `key` (`<module>.<requirement>`). Throws to be retried. */
export async function reconcileGrant(deps: ProvisionDeps, key: string): Promise<void> {
  const { store, log } = deps;
  const found = await readJson(store.kv.grants, key, Grant);
  if (!found) return;
  const grant = found.value;
  // Whatever no installed part needs is taken back (take-back.ts), and so are the bindings of holders that are no longer targets.
  if ((isUnneeded(grant) || pendingWithdrawals(grant).length) && (await takeBack(deps, key, grant))) {
    if (grant.generation === 0 && !grant.removal) {
      await setProvisioned(store, key, {
        status: "False",
        reason: "NoInstalledPart",
        message: `not provisioned: none of the parts that need it (${grant.parts.join(", ")}) is installed`,
      });
    }
    return;
  }
  if (!isTrue(grant.conditions, "Resolved") || !grant.provider) return;
  const generation = targetGeneration(grant);
  let current = grant;
  if (generation !== undefined) {
    const glog = log.child({ grant: grant.id, provider: grant.provider, generation });
    const began = performance.now();
    try {
      current = (await provision(deps, grant, generation)) ?? grant;
      recordProvisioning(grant.kind, (performance.now() - began) / 1000);
      glog.info({ resource: current.resource }, "provisioned");
    } catch (e) {
      recordProvisioning(grant.kind, (performance.now() - began) / 1000, isMeshError(e) ? e.code : ErrorCodes.Internal);
      if (isMeshError(e, ErrorCodes.AdminSecretDiverged)) {
        // Not a failure of this grant: it waits for its provider's admin secret to be repaired.
        glog.warn({ err: e }, "waiting for the provider's admin secret");
        await setProvisioned(store, key, {
          status: "False",
          reason: "AwaitingDependency",
          message: `waiting for the admin password of provider ${grant.provider}, a mesh secret: ${errorMessage(e)}`,
        });
        throw e;
      }
      glog.warn({ err: e }, "provisioning failed");
      await setProvisioned(store, key, { status: "False", reason: "ProvisionFailed", message: `provider ${grant.provider}: ${errorMessage(e)}` });
      throw e;
    }
  }
  await announce(store, current, log);
}

async function provision(deps: ProvisionDeps, grant: Grant, generation: number): Promise<Grant | undefined> {
  const { store, credentials, adapters } = deps;
  const doc = grant.provider === BUILTIN_SECRET_PROVIDER ? undefined : (await readJson(store.kv.providers, grant.provider!, ProviderDoc))?.value;
  if (grant.provider !== BUILTIN_SECRET_PROVIDER && !doc) {
    throw new MeshError("NotFound", `provider ${grant.provider} is not registered any more`, { retryable: true });
  }
  const create = async (adapter: ProviderAdapter) => {
    const stored = await credentials.ensureStored(grant, generation, grant.provider!, () => adapter.generate());
    const target = { module: grant.module, requirement: grant.requirement, generation };
    return { result: await adapter.create({ grant: target, secret: stored.secret, options: grant.options, parts: grant.parts }), stored };
  };
  // A provider whose admin password is a mesh secret may hold another generation of it than the current one.
  const { result, stored } = doc
    ? await withAdminSecret(deps, grant.kind, doc, PROVISIONER_INSTANCE, create)
    : await create(adapters.get(grant.kind, undefined));
  await credentials.setBindings(grant.module, grant.requirement, generation, result.bindings, stored);
  const resource = recordedResource(result, grant.provider!);
  const what = Object.entries(result.resource)
    .map(([k, v]) => `${k} ${v}`)
    .join(", ");
  return mutateJson(store.kv.grants, `${grant.module}.${grant.requirement}`, Grant, (cur) => {
    if (!cur || cur.provider !== grant.provider) return undefined; // re-resolved meanwhile: the next reconcile acts on it
    const next: Grant = {
      ...cur,
      generation: Math.max(cur.generation, generation),
      resource,
      // A generation made after a take-back: what was revoked is in use again.
      revoked: cur.revoked && cur.revoked.generation >= Math.max(cur.generation, generation) ? cur.revoked : undefined,
      conditions: setCondition(cur.conditions, {
        type: "Provisioned",
        status: "True",
        reason: "Provisioned",
        message: `generation ${generation} on ${grant.provider}${what ? `: ${what}` : ""}`,
      }),
    };
    next.conditions = withDeliveredCondition(next);
    return next;
  });
}

async function setProvisioned(
  store: Store,
  key: string,
  c: { status: "True" | "False"; reason: "NoInstalledPart" | "ProvisionFailed" | "AwaitingDependency"; message: string },
): Promise<void> {
  await mutateJson(store.kv.grants, key, Grant, (cur) => {
    if (!cur) return undefined;
    const conditions = setCondition(cur.conditions, { type: "Provisioned", ...c });
    return conditions === cur.conditions ? undefined : { ...cur, conditions };
  });
}

/**
 * Publishes a Delivery for every target that does not hold the current generation. The
 * message id makes repeats within the stream's duplicate window free; agents are idempotent
 * beyond it.
 */
async function announce(store: Store, grant: Grant, log: Logger): Promise<void> {
  if (!isTrue(grant.conditions, "Provisioned") || grant.generation === 0) return;
  for (const t of undelivered(grant)) {
    const d: Delivery = {
      grant: grant.id,
      module: grant.module,
      requirement: grant.requirement,
      part: t.part,
      node: t.node,
      kind: grant.kind,
      provider: grant.provider!,
      generation: grant.generation,
      publishedAt: new Date().toISOString(),
      ...(grant.env ? { env: grant.env } : {}),
    };
    await store.js.publish(subjects.delivery(t.node, grant.module, t.part, grant.requirement), JSON.stringify(d), {
      msgID: deliveryMsgId(grant, t.node, t.part),
      headers: traceHeaders(),
    });
    log.debug({ grant: grant.id, node: t.node, part: t.part, generation: grant.generation }, "delivery announced");
  }
}
