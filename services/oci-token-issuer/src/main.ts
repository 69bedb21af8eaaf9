#!/usr/bin/env node
/**
 * mesh-oci-token-issuer: the token server of a distribution registry that serves `oci.registry`.
 *
 * Environment (all optional):
 * - `MESH_OCI_ISSUER_LISTEN` `host:port` (default `127.0.0.1:5001`): where holders and the
 *   provisioner reach it; the registry's `auth.token.realm` is `http://<that>/token`;
 * - `MESH_OCI_ISSUER_STATE_DIR` (default `/var/lib/mesh-oci-token-issuer`): the signing key and
 *   `signing-cert.pem` (the registry's `auth.token.rootcertbundle`), made on first start, the
 *   users, and `admin-password` (made on first start unless `MESH_OCI_ISSUER_ADMIN_PASSWORD_FILE`
 *   names another file), which the provider's `admin.passwordFile` names;
 * - `MESH_OCI_ISSUER_ADMIN_USER` (default `mesh-admin`);
 * - `MESH_OCI_SERVICE` (default `mesh-registry`) and `MESH_OCI_ISSUER_NAME` (default
 *   `mesh-oci-token-issuer`): the registry's `auth.token.service` and `auth.token.issuer`;
 * - `MESH_OCI_ISSUER_TLS_DIR`: a directory with `tls.crt` and `tls.key` (a `tls.certificate`
 *   binding of the mesh, renewed in place): the issuer serves HTTPS; required beyond loopback;
 * - `MESH_OCI_TOKEN_LIFETIME` seconds (1 … 60, default 60); `MESH_LOG_LEVEL`.
 * Exits 1 when it cannot start, 0 after SIGINT/SIGTERM, 2 for an argument (`--help` lists all this).
 */
import { join } from "node:path";
import { errorMessage, meshVersion } from "@mesh/shared";
import { createLogger, serviceCommandLine } from "@mesh/shared/service";
import { startTokenIssuer } from "./issuer.js";

serviceCommandLine("oci-token-issuer", meshVersion(import.meta.url));
const env = process.env;
const log = createLogger("oci-token-issuer");
try {
  const listen = env.MESH_OCI_ISSUER_LISTEN ?? "127.0.0.1:5001";
  const m = /^(.+):(\d+)$/.exec(listen);
  if (!m) throw new Error(`MESH_OCI_ISSUER_LISTEN ${JSON.stringify(listen)} is not host:port`);
  const stateDir = env.MESH_OCI_ISSUER_STATE_DIR ?? "/var/lib/mesh-oci-token-issuer";
  const lifetime = env.MESH_OCI_TOKEN_LIFETIME === undefined ? undefined : Number(env.MESH_OCI_TOKEN_LIFETIME);
  const issuer = await startTokenIssuer({
    stateDir,
    admin: {
      username: env.MESH_OCI_ISSUER_ADMIN_USER ?? "mesh-admin",
      passwordFile: env.MESH_OCI_ISSUER_ADMIN_PASSWORD_FILE ?? join(stateDir, "admin-password"),
    },
    service: env.MESH_OCI_SERVICE ?? "mesh-registry",
    issuer: env.MESH_OCI_ISSUER_NAME ?? "mesh-oci-token-issuer",
    host: m[1]!.replace(/^\[(.*)\]$/, "$1"),
    port: Number(m[2]),
    ...(env.MESH_OCI_ISSUER_TLS_DIR ? { tlsDir: env.MESH_OCI_ISSUER_TLS_DIR } : {}),
    log,
    ...(lifetime === undefined ? {} : { lifetimeSeconds: lifetime }),
  });
  const stop = () => void issuer.close().then(() => process.exit(0));
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
} catch (e) {
  process.stderr.write(`mesh-oci-token-issuer: ${errorMessage(e)}\n`);
  process.exit(1);
}
