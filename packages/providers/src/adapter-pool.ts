/**
 * One adapter per provider, reused across reconciles (it holds the admin connection pool),
 * replaced when the provider's document changes. The admin password is resolved here, in the
 * provisioner's own environment, and never stored.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import {
  BUILTIN_SECRET_PROVIDER,
  ErrorCodes,
  MeshError,
  adminPasswordPolicy,
  adminSecretOf,
  checkAdminPassword,
  type AdminPasswordPolicy,
  type AdminSecretRef,
  type Kind,
  type MasterKey,
  type ProviderDoc,
} from "@mesh/shared";
import type { ProviderAdapter, ProviderConfig } from "./adapter.js";
import { createAdapter } from "./registry.js";
import { resolveProviderTls } from "./provider-tls.js";

/**
 * The provider's configuration with its admin password read from the env var or file it names,
 * and its `tls:` resolved (provider-tls.ts).
 * Throws `ProviderMisconfigured` when that source is one `policy` refuses (the mesh's own
 * secrets; see admin-password-policy.ts), checked again here, where it is read: the resolver
 * checked it at apply, but on its own machine and at that time.
 */
export function providerConfig(
  doc: ProviderDoc,
  env: NodeJS.ProcessEnv = process.env,
  masterKey?: MasterKey,
  policy: AdminPasswordPolicy = adminPasswordPolicy(env),
  /** The admin password to use instead of reading the source: a generation of the mesh secret that source is a binding file of. */
  adminPassword?: string,
): ProviderConfig {
  const tls = resolveProviderTls(doc, env);
  const cfg: ProviderConfig = {
    name: doc.name,
    node: doc.node,
    endpoint: doc.endpoint,
    ...(doc.options ? { options: doc.options } : {}),
    ...(tls ? { tls } : {}),
    ...(masterKey ? { masterKey } : {}),
  };
  if (!doc.admin) return cfg;
  const refused = checkAdminPassword(doc, policy);
  if (refused) throw new MeshError(ErrorCodes.ProviderMisconfigured, `provider ${doc.name}: ${refused.path} ${refused.message}; nothing was read or sent`);
  let password: string | undefined;
  if (adminPassword !== undefined) {
    password = adminPassword;
  } else if (doc.admin.passwordEnv) {
    password = env[doc.admin.passwordEnv];
    if (password === undefined) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `provider ${doc.name}: the environment variable ${doc.admin.passwordEnv} (admin.passwordEnv) is not set for the provisioner; set it where the provisioner runs`,
      );
    }
  } else if (doc.admin.passwordFile) {
    try {
      password = readFileSync(doc.admin.passwordFile, "utf8").replace(/\r?\n$/, "");
    } catch (e) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `provider ${doc.name}: cannot read admin.passwordFile ${doc.admin.passwordFile} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}); make it readable by the provisioner`,
        { cause: e },
      );
    }
  }
  cfg.admin = password === undefined ? { username: doc.admin.username } : { username: doc.admin.username, password };
  return cfg;
}

export class AdapterPool {
  private readonly adapters = new Map<string, { fingerprint: string; adapter: ProviderAdapter }>();
  /** Read once: a bad `MESH_ADMIN_PASSWORD_*` value fails the service's start. */
  private readonly policy: AdminPasswordPolicy;

  constructor(
    private readonly env: NodeJS.ProcessEnv = process.env,
    private readonly masterKey?: MasterKey,
  ) {
    this.policy = adminPasswordPolicy(env);
  }

  /**
   * The adapter for `kind` at provider `doc` (undefined doc: the built-in secret provider);
   * with `adminPassword`, one that uses it instead of what the document's source holds (kept
   * apart from the pooled one, which stays as it is).
   */
  get(kind: Kind, doc: ProviderDoc | undefined, opts: { adminPassword?: string } = {}): ProviderAdapter {
    const cfg: ProviderConfig = doc
      ? providerConfig(doc, this.env, this.masterKey, this.policy, opts.adminPassword)
      : { name: BUILTIN_SECRET_PROVIDER, node: "builtin", endpoint: "builtin://secret" };
    const key = `${cfg.name}/${kind}${opts.adminPassword === undefined ? "" : "#override"}`;
    // A hash, so the admin password is not kept as a map key in the clear.
    const fingerprint = createHash("sha256").update(JSON.stringify(cfg)).digest("hex");
    const cur = this.adapters.get(key);
    if (cur && cur.fingerprint === fingerprint) return cur.adapter;
    if (cur) void cur.adapter.close();
    const adapter = createAdapter(kind, cfg);
    this.adapters.set(key, { fingerprint, adapter });
    return adapter;
  }

  /** The admin password `doc`'s source holds now (undefined: it names none); throws as {@link providerConfig}. */
  configuredAdminPassword(doc: ProviderDoc): string | undefined {
    return providerConfig(doc, this.env, this.masterKey, this.policy).admin?.password;
  }

  /** The mesh secret `doc`'s admin password is a binding file of, under this service's policy; undefined for any other source. */
  adminSecret(doc: ProviderDoc): AdminSecretRef | undefined {
    return adminSecretOf(doc, this.policy);
  }

  async close(): Promise<void> {
    await Promise.all([...this.adapters.values()].map((a) => a.adapter.close()));
    this.adapters.clear();
  }
}
