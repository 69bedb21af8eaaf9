/**
 * The agent's side of a rotation: after it wrote generation k+1 of a grant for a part, it runs
 * the part's `onRotate` command, proves k+1 logs in from this node, and confirms to the rotator
 * (a request carrying its holder id, the grant and the generation, answered once recorded).
 */
import { spawn } from "node:child_process";
import {
  BUILTIN_SECRET_PROVIDER,
  ErrorCodes,
  MeshError,
  ModuleDoc,
  ProviderDoc,
  ReplyLine,
  errorMessage,
  holderKey,
  isMeshError,
  readJson,
  sendConfirmation,
  traceHeaders,
  type Confirmation,
  type CredentialValues,
  type Delivery,
  type Grant,
  type Logger,
  type Store,
} from "@mesh/shared";
import { createAdapter } from "@mesh/providers";

/** How long a confirmation is sent again while no rotator answers, before the Delivery comes back. */
export const CONFIRM_BUDGET_MS = 30_000;

/** How long a part's `onRotate` command may run. */
export const ON_ROTATE_TIMEOUT_MS = 60_000;

/**
 * True when `d` stages a generation of a running rotation that the grant has not committed yet:
 * the holder must confirm it (again, if it did before a crash: confirmations are idempotent).
 */
export function isRotationDue(d: Delivery, grant: Grant | undefined): boolean {
  return d.rotation !== undefined && grant !== undefined && d.generation > grant.generation;
}

/**
 * Runs `command` with `sh -c` and the rotation's environment; resolves when it exits 0, throws
 * a retryable MeshError with its exit status and the tail of its stderr otherwise.
 */
export function runOnRotate(command: string, env: Record<string, string>, timeoutMs = ON_ROTATE_TIMEOUT_MS): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn("sh", ["-c", command], { env: { ...process.env, ...env }, stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (b: Buffer) => (stderr = (stderr + b.toString()).slice(-500)));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(new MeshError(ErrorCodes.Internal, `the part's onRotate command could not start: ${e.message}`, { retryable: true, cause: e }));
    });
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else {
        const why = signal ? `was killed (${signal}${signal === "SIGKILL" ? `, after ${timeoutMs} ms` : ""})` : `exited with ${code}`;
        reject(new MeshError(ErrorCodes.Internal, `the part's onRotate command ${why}${stderr ? `: ${stderr.trim()}` : ""}; fix the command (the confirmation waits for it)`, { retryable: true }));
      }
    });
  });
}

/**
 * Confirms generation `d.generation` of rotation `d.rotation` for part `d.part` on `node`: the
 * part's `onRotate` (if any), then a login with `values` (the delivered k+1) through the
 * provider's adapter, then the confirmation, sent until the rotator recorded it (for up to
 * {@link CONFIRM_BUDGET_MS}). Throws a retryable MeshError when the command or the login fails,
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
  log: Logger;
}): Promise<void> {
  const { store, node, delivery: d, values, log } = opts;
  const doc = (await readJson(store.kv.manifests, d.module, ModuleDoc))?.value;
  const onRotate = doc?.parts.find((p) => p.name === d.part)?.onRotate;
  if (onRotate) {
    await runOnRotate(onRotate, {
      MESH_GRANT: d.grant,
      MESH_GENERATION: String(d.generation),
      MESH_BINDING_PATH: opts.bindingPath,
      MESH_MODULE: d.module,
      MESH_PART: d.part,
      MESH_REQUIREMENT: d.requirement,
    });
    log.info("onRotate command ran");
  }
  const provider = d.provider === BUILTIN_SECRET_PROVIDER ? undefined : (await readJson(store.kv.providers, d.provider, ProviderDoc))?.value;
  const adapter = createAdapter(d.kind, { name: d.provider, node: provider?.node ?? "builtin", endpoint: provider?.endpoint ?? "builtin://secret" });
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
    await sendConfirmation(line, c, { headers: traceHeaders(), budgetMs: CONFIRM_BUDGET_MS });
  } catch (e) {
    if (isMeshError(e) && !e.retryable) {
      log.warn({ rotation: d.rotation, err: errorMessage(e) }, "the rotator refused the confirmation; nothing to confirm again");
      return;
    }
    throw e;
  } finally {
    line.close();
  }
  log.info({ rotation: d.rotation }, "rotation confirmed");
}
