/**
 * What a `tls.certificate` requirement asks for, and the operator's ceiling on it: the provider
 * document's options (docs/reference/providers.md, `mesh-ca`):
 *
 * - `allowDnsNames`: entries `[<module>:]<pattern>`, a DNS name whose labels may be `*` (one
 *   label) and `{module}` (the requirement's module); by default `*.{module}.mesh`, each
 *   module's own names and nothing public;
 * - `allowIpAddresses`: entries `[<module>:]<address or CIDR>` (IPv6 in brackets when scoped:
 *   `shop:[fd00::]/8`); by default loopback only;
 * - `maxLifetime`: the longest lifetime a requirement may ask for (default 30d);
 * - `allowUsages`: the usages a requirement may ask for (server, client, both; default all).
 *
 * A request outside the ceiling is refused before anything is issued, naming what was asked,
 * what is allowed and which option widens it. Pure.
 */
import { BlockList, isIP } from "node:net";
import {
  CERTIFICATE_USAGES,
  DEFAULT_CERTIFICATE_LIFETIME,
  ErrorCodes,
  MIN_CERTIFICATE_LIFETIME_MS,
  MeshError,
  isValidName,
  parseDuration,
  type CertificateUsage,
  DEFAULT_DNS_CEILING,
  MESH_DOMAIN,
  MODULE_PLACEHOLDER,
  type ProviderOptions,
  type RequirementOptions,
} from "@mesh/shared";

const MODULE = MODULE_PLACEHOLDER;
export const DEFAULT_IP_CEILING = ["127.0.0.0/8", "::1"] as const;
export const DEFAULT_MAX_LIFETIME = "30d";

/** The ceiling as the provider's document sets it. */
export interface CaCeiling {
  dnsNames: readonly string[];
  ipAddresses: readonly string[];
  maxLifetimeMs: number;
  maxLifetime: string;
  usages: readonly CertificateUsage[];
}

/** A certificate request within the ceiling: what the adapter issues. */
export interface CertificateRequest {
  dnsNames: string[];
  ipAddresses: string[];
  lifetimeMs: number;
  usage: CertificateUsage;
}

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** True for a DNS name a certificate may carry: lower-case letters, digits and inner hyphens per label, 253 characters at most. */
export function isDnsName(name: string): boolean {
  return name.length <= 253 && name.split(".").every((l) => LABEL.test(l));
}

/** An entry's module scope (absent: every module) and the rest; an IPv6 rest of a scoped entry is bracketed. */
function scoped(entry: string): { module?: string; value: string } {
  const at = entry.indexOf(":");
  if (at > 0 && isValidName(entry.slice(0, at))) {
    const value = entry.slice(at + 1);
    // `fd00::/8` and `abc:fd00::/8` are addresses, not modules fd00's and abc's: a scoped IPv6 is bracketed.
    if (!value.includes(":") || value.startsWith("[")) return { module: entry.slice(0, at), value };
  }
  return { value: entry };
}

/** An address or CIDR, brackets removed: `[fd00::]/8` → fd00::/8. */
function cidr(value: string): { address: string; prefix?: number; family: "ipv4" | "ipv6" } | undefined {
  const m = /^\[?([^\]/]+)\]?(?:\/(\d{1,3}))?$/.exec(value);
  if (!m) return undefined;
  const v = isIP(m[1]!);
  if (v === 0) return undefined;
  const prefix = m[2] === undefined ? undefined : Number(m[2]);
  if (prefix !== undefined && prefix > (v === 4 ? 32 : 128)) return undefined;
  return { address: m[1]!, ...(prefix !== undefined ? { prefix } : {}), family: v === 4 ? "ipv4" : "ipv6" };
}

const list = (v: string | string[] | undefined): string[] | undefined => (v === undefined ? undefined : Array.isArray(v) ? v : [v]);

/** The ceiling of provider `provider` from its options; throws `ProviderMisconfigured` naming a bad entry. */
export function caCeiling(provider: string, options: ProviderOptions | undefined): CaCeiling {
  const bad = (option: string, entry: string, rule: string) =>
    new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${provider}: options.${option} entry ${JSON.stringify(entry)} ${rule}; fix the provider's document`,
    );
  const dnsNames = list(options?.allowDnsNames) ?? [...DEFAULT_DNS_CEILING];
  for (const e of dnsNames) {
    const { value } = scoped(e);
    if (!isDnsName(value.replaceAll(MODULE, "m").replaceAll("*", "x"))) {
      throw bad("allowDnsNames", e, "is not a DNS name pattern ([<module>:]<labels>, a label may be * or {module})");
    }
  }
  const ipAddresses = list(options?.allowIpAddresses) ?? [...DEFAULT_IP_CEILING];
  for (const e of ipAddresses) {
    if (!cidr(scoped(e).value)) throw bad("allowIpAddresses", e, "is not an address or CIDR ([<module>:]<address>[/<bits>], IPv6 in brackets when scoped)");
  }
  const maxLifetime = typeof options?.maxLifetime === "string" ? options.maxLifetime : DEFAULT_MAX_LIFETIME;
  let maxLifetimeMs: number;
  try {
    maxLifetimeMs = parseDuration(maxLifetime);
  } catch {
    throw bad("maxLifetime", maxLifetime, "is not a duration (90s, 10m, 2h, 30d)");
  }
  if (maxLifetimeMs < MIN_CERTIFICATE_LIFETIME_MS)
    throw bad("maxLifetime", maxLifetime, `is shorter than the shortest lifetime, ${MIN_CERTIFICATE_LIFETIME_MS / 1000}s`);
  const usages = list(options?.allowUsages) ?? [...CERTIFICATE_USAGES];
  for (const u of usages)
    if (!(CERTIFICATE_USAGES as readonly string[]).includes(u)) throw bad("allowUsages", u, `is not one of ${CERTIFICATE_USAGES.join(", ")}`);
  return { dnsNames, ipAddresses, maxLifetimeMs, maxLifetime, usages: usages as CertificateUsage[] };
}

/** True when `name` matches `pattern` (labels equal, or `*` for exactly one label). */
function dnsMatches(name: string, pattern: string): boolean {
  const n = name.split(".");
  const p = pattern.split(".");
  return n.length === p.length && p.every((label, i) => label === "*" || label === n[i]);
}

/** The entries of `entries` that apply to `module`, with `{module}` filled in. */
function entriesFor(entries: readonly string[], module: string): string[] {
  return entries
    .map(scoped)
    .filter((e) => e.module === undefined || e.module === module)
    .map((e) => e.value.replaceAll(MODULE, module));
}

function ipAllowed(address: string, entries: readonly string[]): boolean {
  const blocks = new BlockList();
  for (const e of entries) {
    const c = cidr(e)!;
    if (c.prefix === undefined) blocks.addAddress(c.address, c.family);
    else blocks.addSubnet(c.address, c.prefix, c.family);
  }
  return blocks.check(address, isIP(address) === 4 ? "ipv4" : "ipv6");
}

/**
 * The certificate `options` ask for on behalf of `grant` (held by `parts`), within `ceiling`;
 * throws `InvalidRequest` naming the option, what is allowed and what to do.
 */
export function certificateRequest(
  grant: { module: string; requirement: string },
  parts: readonly string[],
  options: RequirementOptions | undefined,
  provider: string,
  ceiling: CaCeiling,
): CertificateRequest {
  const id = `${grant.module}/${grant.requirement}`;
  const refuse = (message: string) => new MeshError(ErrorCodes.InvalidRequest, `tls.certificate ${id}: ${message}`);
  const strings = (option: string): string[] | undefined => {
    const v = options?.[option];
    if (v === undefined) return undefined;
    if (typeof v === "string") return [v];
    if (Array.isArray(v)) return v;
    throw refuse(`option ${option} must be a string or a list of strings; got ${JSON.stringify(v)}`);
  };
  const known = ["dnsNames", "ipAddresses", "lifetime", "usage"];
  for (const k of Object.keys(options ?? {})) if (!known.includes(k)) throw refuse(`option ${k} is unknown; tls.certificate takes ${known.join(", ")}`);

  const holders = parts.length ? parts : [grant.requirement];
  const dnsNames = [...new Set(strings("dnsNames") ?? holders.map((p) => `${p}.${grant.module}.${MESH_DOMAIN}`))];
  const ipAddresses = [...new Set(strings("ipAddresses") ?? [])];
  if (dnsNames.length + ipAddresses.length === 0) throw refuse("it names no DNS name and no IP address; give options.dnsNames or options.ipAddresses");
  for (const n of dnsNames) {
    if (!isDnsName(n))
      throw refuse(`DNS name ${JSON.stringify(n)} is not one a certificate may carry (lower-case labels of letters, digits and inner hyphens; no wildcards)`);
  }
  for (const a of ipAddresses) if (isIP(a) === 0) throw refuse(`IP address ${JSON.stringify(a)} is not an IPv4 or IPv6 address`);

  const dnsCeiling = entriesFor(ceiling.dnsNames, grant.module);
  const outDns = dnsNames.filter((n) => !dnsCeiling.some((p) => dnsMatches(n, p)));
  if (outDns.length) {
    throw refuse(
      `DNS name${outDns.length > 1 ? "s" : ""} ${outDns.join(", ")} ${outDns.length > 1 ? "are" : "is"} outside what provider ${provider} issues to module ${grant.module} (${dnsCeiling.join(", ") || "no names"}); ask for a name there, or widen the provider's options.allowDnsNames`,
    );
  }
  const ipCeiling = entriesFor(ceiling.ipAddresses, grant.module);
  const outIp = ipAddresses.filter((a) => !ipAllowed(a, ipCeiling));
  if (outIp.length) {
    throw refuse(
      `IP address${outIp.length > 1 ? "es" : ""} ${outIp.join(", ")} ${outIp.length > 1 ? "are" : "is"} outside what provider ${provider} issues to module ${grant.module} (${ipCeiling.join(", ") || "no addresses"}); widen the provider's options.allowIpAddresses`,
    );
  }

  const lifetime = options?.lifetime ?? DEFAULT_CERTIFICATE_LIFETIME;
  let lifetimeMs = NaN;
  try {
    lifetimeMs = typeof lifetime === "string" ? parseDuration(lifetime) : NaN;
  } catch {
    // reported below
  }
  if (Number.isNaN(lifetimeMs)) throw refuse(`option lifetime must be a duration (90s, 10m, 24h, 30d); got ${JSON.stringify(lifetime)}`);
  if (lifetimeMs < MIN_CERTIFICATE_LIFETIME_MS)
    throw refuse(`lifetime ${lifetime} is shorter than ${MIN_CERTIFICATE_LIFETIME_MS / 1000}s, the shortest the mesh renews in time`);
  if (lifetimeMs > ceiling.maxLifetimeMs) {
    throw refuse(
      `lifetime ${lifetime} is longer than provider ${provider} allows (${ceiling.maxLifetime}); ask for less, or raise the provider's options.maxLifetime`,
    );
  }

  const usage = options?.usage ?? "server";
  if (typeof usage !== "string" || !(CERTIFICATE_USAGES as readonly string[]).includes(usage)) {
    throw refuse(`option usage must be one of ${CERTIFICATE_USAGES.join(", ")}; got ${JSON.stringify(usage)}`);
  }
  if (!ceiling.usages.includes(usage as CertificateUsage)) {
    throw refuse(
      `usage ${usage} is not allowed by provider ${provider} (${ceiling.usages.join(", ")}); ask for one of those, or widen the provider's options.allowUsages`,
    );
  }
  return { dnsNames, ipAddresses, lifetimeMs, usage: usage as CertificateUsage };
}
