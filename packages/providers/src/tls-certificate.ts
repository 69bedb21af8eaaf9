/**
 * The adapter of kind `tls.certificate` at provider `mesh-ca`: the mesh's own certificate
 * authority (mesh-ca.ts). Each generation is a fresh P-256 key (its secret material) and a
 * certificate for it, signed by the authority, for the names the requirement asks within the
 * provider's ceiling (tls-request.ts), bound in servicebinding.io's TLS layout: `tls.crt`,
 * `tls.key`, `ca.crt` and `type: tls`. The certificate expires by itself (`expiresAt`), so the
 * rotator renews it after two thirds of its lifetime through the ordinary fan-out.
 *
 * There is nothing external: the resource always exists, delete has nothing to undo, and retire
 * leaves the old certificate valid until its `notAfter` (a short lifetime is the revocation;
 * docs/security.md). A login checks the held files as a TLS peer would: the certificate chains
 * to the bundle delivered beside it, matches the key and is valid now; where the provider's
 * `caCertFile` is readable, it must chain to an authority there too, so a binding cannot vouch
 * for itself. The authority's files are read at every issue, so each step of its rotation
 * (mesh-ca.ts) is seen at once.
 *
 * The provider's document names the authority's files (`options.caCertFile`, and
 * `options.caKeyFile`, sealed under the master key, which only the services that issue need)
 * and the ceiling (`allowDnsNames`, `allowIpAddresses`, `maxLifetime`, `allowUsages`).
 */
import { readFileSync } from "node:fs";
import { X509Certificate, createHash } from "node:crypto";
import { ErrorCodes, Kinds, MeshError, errorMessage } from "@mesh/shared";
import type { AdapterFactory, CreateRequest, CreateResult, LoginResult, ObserveResult, ProviderAdapter, ProviderConfig } from "./adapter.js";
import { checkGrantRef } from "./grant-ref.js";
import { checkCertificate, fingerprintOf, trustsOf, issueCertificate, newPrivateKeyPem, openAuthority, type Authority } from "./mesh-ca.js";
import { caCeiling, certificateRequest } from "./tls-request.js";

/** The binding keys, in servicebinding.io's TLS layout. */
export const TLS_BINDING = { certificate: "tls.crt", key: "tls.key", bundle: "ca.crt" } as const;

/** Makes the `tls.certificate` adapter of `provider`. */
export const createMeshCaAdapter: AdapterFactory = (provider) => new MeshCaAdapter(provider);

class MeshCaAdapter implements ProviderAdapter {
  readonly kinds = [Kinds.TlsCertificate] as const;
  /** The authority as last opened, and a digest of the files it was opened from: read again when they change (a rotation of the authority). */
  private authority: { digest: string; opened: Promise<Authority> } | undefined;

  constructor(private readonly provider: ProviderConfig) {}

  generate() {
    return { key: newPrivateKeyPem() };
  }

  async observe(req: { grant: CreateRequest["grant"] }): Promise<ObserveResult> {
    checkGrantRef(req.grant);
    return { exists: true, details: {} };
  }

  async create(req: CreateRequest): Promise<CreateResult> {
    checkGrantRef(req.grant);
    const { name } = this.provider;
    const spec = certificateRequest(req.grant, req.parts ?? [], req.options, name, caCeiling(name, this.provider.options));
    const key = req.secret.key;
    if (typeof key !== "string" || !key.includes("PRIVATE KEY")) {
      throw new MeshError(
        ErrorCodes.InvalidRequest,
        `secret material of ${req.grant.module}/${req.grant.requirement} has no private key; make it with generate()`,
      );
    }
    const ca = await this.currentAuthority();
    const pem = await issueCertificate(ca, { keyPem: key, ...spec });
    const cert = new X509Certificate(pem);
    const expiresAt = new Date(cert.validTo).toISOString();
    return {
      resource: {
        serial: cert.serialNumber,
        names: [...spec.dnsNames, ...spec.ipAddresses].join(","),
        usage: spec.usage,
        // Which authority signed it and which the holders trust: what a rotation of the authority waits for.
        authority: fingerprintOf(new X509Certificate(ca.certificate.toString("pem"))),
        trusts: trustsOf(ca.bundlePem),
      },
      expiresAt,
      bindings: { type: "tls", provider: name, [TLS_BINDING.certificate]: pem, [TLS_BINDING.key]: key, [TLS_BINDING.bundle]: ca.bundlePem },
    };
  }

  async delete(req: { grant: Omit<CreateRequest["grant"], "generation"> }): Promise<void> {
    checkGrantRef({ ...req.grant, generation: 1 });
  }

  async retire(req: { grant: CreateRequest["grant"] }): Promise<void> {
    // The old certificate stays valid until its notAfter: a short lifetime is its revocation.
    checkGrantRef(req.grant);
  }

  async login(req: { bindings: Record<string, string> }): Promise<LoginResult> {
    const b = req.bindings;
    const [certPem, keyPem, caPem] = [b[TLS_BINDING.certificate], b[TLS_BINDING.key], b[TLS_BINDING.bundle]];
    const missing = Object.values(TLS_BINDING).filter((k) => !b[k]);
    if (missing.length) return { ok: false, reason: "missing", message: `the tls binding lacks ${missing.join(", ")}` };
    // Trusted by the peers it will meet (its own ca.crt) and by the authority itself where this process can read it.
    const held = checkCertificate({ certPem: certPem!, keyPem: keyPem!, caPem: caPem! });
    if (!held.ok) return { ok: false, reason: "rejected", message: held.message };
    const trusted = this.trustedBundle();
    if (trusted && !checkCertificate({ certPem: certPem!, keyPem: keyPem!, caPem: trusted }).ok) {
      return {
        ok: false,
        reason: "rejected",
        message: `certificate ${held.serial} is not signed by an authority of provider ${this.provider.name} (${this.provider.options?.caCertFile})`,
      };
    }
    return { ok: true };
  }

  async close(): Promise<void> {}

  /** The authority's certificate from `options.caCertFile` where this process can read it (an agent on another node may not). */
  private trustedBundle(): string | undefined {
    const file = this.provider.options?.caCertFile;
    if (typeof file !== "string") return undefined;
    try {
      return readFileSync(file, "utf8");
    } catch {
      return undefined;
    }
  }

  private async currentAuthority(): Promise<Authority> {
    const files = this.authorityFiles();
    let texts: [string, string];
    try {
      texts = [readFileSync(files.certFile, "utf8"), readFileSync(files.keyFile, "utf8")];
    } catch (e) {
      throw this.unopened(files, e);
    }
    const digest = createHash("sha256").update(texts.join("\0")).digest("hex");
    if (this.authority?.digest !== digest) {
      const opened = this.open(files, ...texts);
      opened.catch(() => (this.authority = undefined));
      this.authority = { digest, opened };
    }
    return this.authority.opened;
  }

  private authorityFiles(): { certFile: string; keyFile: string } {
    const { name, options, masterKey } = this.provider;
    const [certFile, keyFile] = [options?.caCertFile, options?.caKeyFile];
    if (typeof certFile !== "string" || typeof keyFile !== "string") {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `provider ${name} names no authority: it needs options.caCertFile and options.caKeyFile (meshctl up and meshctl bootstrap write them)`,
      );
    }
    if (!masterKey) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `provider ${name}: this service holds no master key, so it cannot open the authority's key ${keyFile}`,
      );
    }
    return { certFile, keyFile };
  }

  private async open(files: { certFile: string; keyFile: string }, bundle: string, sealedKey: string): Promise<Authority> {
    try {
      return await openAuthority(this.provider.masterKey!, bundle, sealedKey);
    } catch (e) {
      throw this.unopened(files, e);
    }
  }

  private unopened(files: { certFile: string; keyFile: string }, e: unknown): MeshError {
    return new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${this.provider.name}: cannot open the certificate authority (${files.certFile}, ${files.keyFile}): ${errorMessage(e)}; the files must be readable by the service and sealed under its master key`,
      { cause: e },
    );
  }
}
