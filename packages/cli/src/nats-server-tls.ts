/**
 * The TLS of the NATS server `meshctl up` and `meshctl bootstrap` run. The server starts with a
 * certificate the authority issues at once (nothing else can issue before the server runs);
 * from then on its certificate is grant `mesh/nats-tls` of the control plane, issued and
 * rotated like any other, and meshctl, as part `nats-server`, is the holder that installs each
 * generation.
 *
 * This is the one reload the mesh makes. The server's configuration names `tls/current/tls.crt`
 * and `tls/current/tls.key`; a new generation is written into a new directory and the link
 * renamed over (so the server never reads a certificate with another generation's key), then
 * the server gets SIGHUP. nats-server 2.9.10 reloads its certificate on SIGHUP; it keeps the
 * connections of clients that logged in with the JWT and its signature alone (the mesh's own:
 * jwtAuthenticator in @mesh/shared); the configuration never changes, so the reload takes
 * nothing else with it. The holder confirms only once a new handshake shows the new serial.
 */
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { CONTROL_PLANE_MODULE, ControlPlaneRequirements, NATS_SERVER_PART, errorMessage, grantId, type MasterKey } from "@mesh/shared";
import { connectNats, natsIdentity, servedCertificate } from "@mesh/shared/runtime";
import type { CaFiles, OperatorFiles } from "@mesh/providers";
import { holdCredential, type CredentialHolder } from "@mesh/client";
import { installServerCertificate, issueServerCertificate, type ServerCertificate } from "./bootstrap.js";

/** How long the server certificate of a server up starts is valid unless `--nats-tls-lifetime` says: renewed at two thirds, like any certificate of the mesh. */
export const UP_NATS_TLS_LIFETIME = "24h";

/** How long a renewal waits for a handshake to show the new serial after SIGHUP. */
const RELOAD_CONFIRM_MS = 15_000;

export interface ServerTlsOptions {
  files: OperatorFiles;
  ca: CaFiles;
  masterKey: MasterKey;
  /** Where the server listens: its certificate names it (`127.0.0.1`, and `localhost`). */
  host: string;
  port: number;
  lifetimeMs: number;
}

/** Issues the server's certificate for `host` (an IP address, with `localhost`) under the authority's current key. */
export function issueUpServerCertificate(o: ServerTlsOptions): Promise<ServerCertificate> {
  return issueServerCertificate(o.files, { ca: o.ca, masterKey: o.masterKey, dnsNames: ["localhost"], ipAddresses: [o.host], lifetimeMs: o.lifetimeMs });
}

/**
 * Installs a certificate and its key for the server (a new directory, the link renamed over),
 * sends the server (`pid`) SIGHUP, and waits until a new handshake shows the certificate's
 * serial; throws saying what the server presents instead when it does not within
 * {@link RELOAD_CONFIRM_MS}. A server that presents it already is not reloaded.
 */
export async function installAndReload(
  o: Pick<ServerTlsOptions, "files" | "ca" | "host" | "port"> & { pid: number; certPem: string; keyPem: string },
): Promise<ServerCertificate> {
  const served = async () => {
    const c = await servedCertificate({ host: o.host, port: o.port }, { ca: readFileSync(o.ca.certFile, "utf8"), timeoutMs: 5_000 });
    return c.certificate?.serialNumber.toLowerCase();
  };
  const result = installServerCertificate(o.files, o.certPem, o.keyPem);
  const wanted = result.serial;
  if ((await served().catch(() => undefined)) === wanted) return result;
  process.kill(o.pid, "SIGHUP");
  const deadline = Date.now() + RELOAD_CONFIRM_MS;
  let seen: string;
  for (;;) {
    try {
      const serial = await served();
      if (serial === wanted) return result;
      seen = `serial ${serial ?? "none"}`;
    } catch (e) {
      seen = errorMessage(e);
    }
    if (Date.now() > deadline) {
      throw new Error(
        `sent the NATS server (pid ${o.pid}) SIGHUP after installing certificate ${wanted}, but a new handshake still shows ${seen} after ${RELOAD_CONFIRM_MS / 1000} s; see its log`,
      );
    }
    await sleep(200);
  }
}

/**
 * Holds the server's certificate, grant `mesh/nats-tls`, as part `nats-server` of the control
 * plane: installs each generation it is given and reloads the server, and confirms a rotation
 * only once a new handshake shows the generation's serial. Says each step through `onEvent`.
 */
export async function holdServerCertificate(
  o: Pick<ServerTlsOptions, "files" | "ca" | "host" | "port"> & {
    url: string;
    /** Part `nats-server`'s identity: the directory of its `nats.user` binding. */
    identityDir: string;
    node: string;
    pid: number;
    onEvent: (line: string) => void;
  },
): Promise<{ stop(): Promise<void>; first: Promise<void> }> {
  const grant = grantId(CONTROL_PLANE_MODULE, ControlPlaneRequirements.natsTls);
  const nc = await connectNats(o.url, { ...natsIdentity({ MESH_NATS_CREDENTIALS: o.identityDir }), tls: { caFile: o.ca.certFile }, name: "mesh-nats-server" });
  let holder: CredentialHolder;
  try {
    holder = await holdCredential(nc, {
      module: CONTROL_PLANE_MODULE,
      part: NATS_SERVER_PART,
      requirement: ControlPlaneRequirements.natsTls,
      node: o.node,
      instance: "meshctl",
    });
  } catch (e) {
    await nc.close().catch(() => undefined);
    throw e;
  }
  // Settled once the first generation given is presented, or could not be.
  let firstDone!: () => void;
  const first = new Promise<void>((resolve) => (firstDone = resolve));
  const running = (async () => {
    for await (const held of holder) {
      try {
        const [certPem, keyPem] = [held.values["tls.crt"], held.values["tls.key"]];
        if (!certPem || !keyPem) throw new Error("its values lack tls.crt or tls.key");
        const installed = await installAndReload({ ...o, certPem, keyPem });
        await held.confirm();
        o.onEvent(
          `the NATS server presents generation ${held.generation} of ${grant}: certificate ${installed.serial}, valid until ${installed.notAfter.toISOString()}${held.rotation ? "; confirmed" : ""}`,
        );
      } catch (e) {
        o.onEvent(`could not give the NATS server generation ${held.generation} of ${grant} (${errorMessage(e)}); its rotation waits for this holder`);
      }
      firstDone();
    }
    firstDone();
  })();
  return {
    first,
    async stop() {
      await holder.stop().catch(() => undefined);
      await running;
      await nc.close().catch(() => undefined);
    },
  };
}
