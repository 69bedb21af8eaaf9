/**
 * The mesh's own directory on a machine (`.mesh` by default, `MESH_STATE_DIR`) and what is in
 * it: the master key, the operator's directory, the bindings of `meshctl up`'s agents, logs.
 * `meshctl up` and `bootstrap` lay it out, the services find their defaults in it, and no
 * Provider's admin password may be read from it (admin-password-policy.ts).
 */

/** The state directory when `MESH_STATE_DIR` is not set, relative to the working directory. */
export const DEFAULT_STATE_DIR = ".mesh";

/** Names in the state directory. */
export const StateFiles = {
  /** The master key every credential at rest is encrypted under (`MESH_MASTER_KEY_FILE` moves it). */
  masterKey: "master.key",
  /** The operator's directory: its keys (sealed), JWTs, the admin's `.creds`, a server's config. */
  operatorDir: "nats-operator",
  /** The mesh's certificate authority: its certificate and its key (sealed). */
  caDir: "mesh-ca",
  /** `<node>/<module>/<part>/<requirement>/`: what `meshctl up`'s agents write. */
  bindings: "bindings",
  logs: "logs",
} as const;

/** The operator admin's `.creds` in an operator directory. */
export const OPERATOR_ADMIN_CREDS = "admin.creds";

/** Where an agent writes bindings when it is told nothing else (`mesh-agent`, the systemd unit). */
export const DEFAULT_BINDINGS_ROOT = "/var/lib/mesh/bindings";
