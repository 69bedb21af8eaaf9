/**
 * `meshctl ca rotate`: a new root for the mesh's certificate authority (provider `mesh-ca`),
 * with no failed handshake on the way. Three steps (mesh-ca.ts records each in the authority's
 * files, so the command run again resumes where it was cut short):
 *
 * 1. the new authority joins the bundle; certificates are still issued under the old one, and
 *    every `tls.certificate` grant of the provider is rotated so every holder trusts both;
 * 2. the new authority issues (the old key is gone) and every grant is rotated again: each
 *    holder presents a certificate of the new one, which every peer already trusts;
 * 3. the bundle keeps the new authority alone, and every grant is rotated once more, so the old
 *    root is trusted by no holder.
 *
 * The grants of a provider whose server the authority vouches for carry the bundle in their
 * bindings: a NATS provider's whose `options.caFile` is the authority's bundle (`ca.crt`), and
 * a provider's that says `tls: { mesh: true }` (`ca.crt`, `sslrootcert`). They are rotated with
 * steps 1 and 3, so their holders trust the new root before any server presents it, and the
 * old one no longer. Such a server run as a module presents a certificate of the new root once
 * its own `tls.certificate` grant is rotated in step 2.
 * Before step 3 the server a mesh runs (`meshctl up`, `bootstrap`) must present a certificate of
 * the new root: the command waits until a handshake shows one.
 *
 * A step is done when every grant's resource says so (`trusts`, `authority`: what the adapter
 * recorded when it issued), not when its rotations ended: a rotation already running when the
 * step began was staged with the files before it and is rotated again.
 */
import { Grant, Kinds, MESH_CA_PROVIDER, ProviderDoc, TLS_PROVIDER_KINDS, isTrue, type Kind, type MasterKey } from "@mesh/shared";
import { listJson, readJson, servedCertificate, type Store } from "@mesh/shared/runtime";
import {
  beginCaRotation,
  caFiles,
  caRotationStep,
  certificatesOf,
  dropRetiredAuthorities,
  fingerprintOf,
  NATS_CA_FILE_OPTION,
  readAuthority,
  switchCaIssuer,
  type CaFiles,
} from "@mesh/providers";
import { existsSync, readFileSync } from "node:fs";
import { dirname } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import type { Output } from "./output.js";
import { rotateEach, type KindRotation } from "./rotate-kind-command.js";

export interface CaRotateOptions {
  masterKey: MasterKey;
  /** The provider whose authority is rotated (default `mesh-ca`). */
  provider?: string;
  /** How long each grant's rotation may take (its holders' deadline), as `meshctl rotate --timeout`. */
  rotationTimeoutMs?: number;
  /** How long the whole command may take before it stops (it resumes when run again). */
  timeoutMs: number;
  json?: boolean;
  /** The NATS server the command is connected to: before the old root leaves the bundle, it must present a certificate of the new one. */
  server?: { host: string; port: number };
}

/** The kinds of a NATS provider whose bindings carry its bundle as `ca.crt`. */
const CARRY_BUNDLE: readonly Kind[] = [Kinds.NatsUser, Kinds.MeshIdentity];

/** One step of the rotation, as printed and in `--json`: its rotations, and where each grant stands once it is done. */
interface StepOutcome {
  step: 1 | 2 | 3;
  what: string;
  rotations: KindRotation[];
  /** Per grant: the authority that signed its certificate and the ones its holders trust (fingerprints). */
  after: Record<string, { authority: string; trusts: string }>;
}

/** The authority's files as the provider's document names them, checked to be on this host. */
export async function caFilesOf(store: Store, provider: string): Promise<CaFiles> {
  const doc = (await readJson(store.kv.providers, provider, ProviderDoc))?.value;
  if (!doc) throw new CliError(`no provider ${provider} is registered: meshctl up registers ${MESH_CA_PROVIDER}`, ExitCodes.NotFound);
  const [certFile, keyFile] = [doc.options?.caCertFile, doc.options?.caKeyFile];
  if (typeof certFile !== "string" || typeof keyFile !== "string") {
    throw new CliError(`provider ${provider} names no authority (options.caCertFile and options.caKeyFile): it is not a certificate authority of the mesh`);
  }
  if (!existsSync(certFile) || !existsSync(keyFile)) {
    throw new CliError(
      `the authority's files of provider ${provider} (${certFile}, ${keyFile}) are not on this host: run meshctl ca rotate on node ${doc.node}, where the services that issue read them`,
    );
  }
  return { ...caFiles(dirname(certFile)), certFile, keyFile };
}

/** Runs the command; 0 once the old root is trusted by no holder. */
export async function runCaRotate(store: Store, files: CaFiles, opts: CaRotateOptions, out: Output): Promise<number> {
  const provider = opts.provider ?? MESH_CA_PROVIDER;
  const deadline = Date.now() + opts.timeoutMs;
  const say = (line: string) => {
    if (!opts.json) out.out(line);
  };
  const issuing = async () => fingerprintOf(certificatesOf((await readAuthority(files, opts.masterKey)).certificate.toString("pem"))[0]!);
  const from = await issuing();
  const steps: StepOutcome[] = [];
  const step = await caRotationStep(files, opts.masterKey).catch((e: unknown) => {
    throw new CliError(`cannot open the authority in ${files.dir}: ${(e as Error).message}`);
  });

  let to: string;
  if (step !== "switched") {
    to = await beginCaRotation(files, opts.masterKey);
    const what = `${step === "introduced" ? "resumed: " : ""}authority ${to} joins the bundle beside ${from}, which still issues; every holder is given both`;
    steps.push({ step: 1, what, ...(await reissue(1, what, (g) => (g.resource.trusts ?? "").split(",").includes(to), true)) });
    await switchCaIssuer(files, opts.masterKey);
  } else {
    to = from;
  }
  const what2 = `authority ${to} issues now (the old key is gone); every certificate is issued again under it`;
  steps.push({ step: 2, what: what2, ...(await reissue(2, what2, (g) => g.resource.authority === to)) });
  await serverUnder(to);
  await dropRetiredAuthorities(files, opts.masterKey);
  const what3 = `the bundle holds ${to} alone; every holder is given it`;
  steps.push({ step: 3, what: what3, ...(await reissue(3, what3, (g) => g.resource.trusts === to, true)) });

  if (opts.json) out.out(JSON.stringify({ provider, from: step === "switched" ? undefined : from, to, steps }, null, 2));
  else out.out(`the authority of provider ${provider} is rotated${step === "switched" ? "" : `: ${from} → ${to}`}; no holder trusts another any more`);
  return ExitCodes.Ok;

  /**
   * Waits until the NATS server the command is connected to presents a certificate the
   * authority `fp` signed, when it presents one of this authority at all (a server with a
   * certificate of another, or without TLS, is not this authority's to follow).
   */
  async function serverUnder(fp: string): Promise<void> {
    if (!opts.server) return;
    const where = `${opts.server.host}:${opts.server.port}`;
    let said = false;
    for (;;) {
      const bundle = readFileSync(files.certFile, "utf8");
      const served = await servedCertificate(opts.server, { ca: bundle }).catch(() => undefined);
      if (!served?.certificate) return;
      const issuer = certificatesOf(bundle).find((c) => fingerprintOf(c) === fp);
      if (issuer && served.certificate.checkIssued(issuer) && served.certificate.verify(issuer.publicKey)) return;
      if (!said) {
        say(
          `waiting for the NATS server at ${where} to present a certificate of ${fp} before the old root leaves the bundle (meshctl up and bootstrap renew theirs within seconds; for a server you run: meshctl nats-config --tls-name … again, then SIGHUP)`,
        );
        said = true;
      }
      if (Date.now() > deadline) {
        throw new CliError(
          `the NATS server at ${where} still presents a certificate of the old root (serial ${served.certificate.serialNumber.toLowerCase()}), so the old root stays in the bundle: renew the server's certificate and run meshctl ca rotate again to finish`,
          ExitCodes.WaitTimedOut,
        );
      }
      await sleep(1_000);
    }
  }

  /**
   * Rotates every provisioned grant of the provider that is not `done` yet, until every one is
   * (a rotation that was running when the step began is made again), or the deadline passes.
   */
  async function reissue(n: number, what: string, done: (g: Grant) => boolean, bundles = false): Promise<Pick<StepOutcome, "rotations" | "after">> {
    const all: KindRotation[] = [];
    let said = false;
    // With `bundles`, the grants of the providers whose servers the authority vouches for too,
    // of the kinds whose bindings carry the bundle (a NATS provider's stores' bindings do not).
    const carriers = new Map<string, readonly Kind[]>();
    if (bundles) {
      for (const { value: p } of await listJson(store.kv.providers, ProviderDoc)) {
        if (p.options?.[NATS_CA_FILE_OPTION] === files.certFile) carriers.set(p.name, CARRY_BUNDLE);
        else if (p.tls?.mesh && provider === MESH_CA_PROVIDER) carriers.set(p.name, TLS_PROVIDER_KINDS);
      }
    }
    for (;;) {
      const grants = (await listJson(store.kv.grants, Grant))
        .map((e) => e.value)
        .filter(
          (g) =>
            (g.provider === provider || carriers.get(g.provider ?? "")?.includes(g.kind) === true) && g.generation > 0 && isTrue(g.conditions, "Provisioned"),
        );
      const left = grants.filter((g) => !done(g));
      if (!said) say(`step ${n} of 3: ${what} (${left.length} of ${grants.length} grants to rotate)`);
      said = true;
      if (left.length === 0) {
        const after = Object.fromEntries(
          grants.filter((g) => g.provider === provider).map((g) => [g.id, { authority: g.resource.authority ?? "", trusts: g.resource.trusts ?? "" }]),
        );
        return { rotations: all, after };
      }
      if (Date.now() > deadline) {
        throw new CliError(
          `step ${n} of 3 is not done within the timeout: ${left.map((g) => g.id).join(", ")} still to rotate; run meshctl ca rotate again to resume (each line above says why a rotation did not commit)`,
          ExitCodes.WaitTimedOut,
        );
      }
      const rotations = await rotateEach(
        store,
        left.map((g) => g.id),
        { wait: true, ...(opts.rotationTimeoutMs ? { timeoutMs: opts.rotationTimeoutMs } : {}) },
        (r) => say(`  ${r.grant}: ${r.said}`),
      );
      all.push(...rotations);
      // A grant that was rotating already, or not yet recorded as issued anew: looked at again shortly.
      if (rotations.some((r) => r.exitCode !== ExitCodes.Ok)) await sleep(1_000);
    }
  }
}
