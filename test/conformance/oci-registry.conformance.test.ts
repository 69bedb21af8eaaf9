/**
 * The oci.registry adapter against a distribution registry of the test's own (Debian's
 * docker-registry) whose tokens come from the mesh's token issuer, both started here.
 */
import { afterAll, beforeAll } from "vitest";
import type { ProviderConfig } from "@mesh/providers";
import { createOciRegistryAdapter } from "../../packages/providers/src/oci-registry.js";
import { freePort } from "../harness/ports.js";
import { startOwnOciRegistry, type OwnOciRegistry } from "../harness/oci-registry.js";
import { describeProviderConformance } from "./provider-conformance.js";

let registry: OwnOciRegistry;
let deadPort: number;

beforeAll(async () => {
  registry = await startOwnOciRegistry();
  deadPort = await freePort();
}, 60_000);
afterAll(async () => {
  await registry?.stop();
});

const providerOf = (over: Partial<ProviderConfig> = {}): ProviderConfig => ({
  name: "oci-test",
  node: "node-a",
  endpoint: registry.registryUrl,
  admin: registry.admin,
  options: { issuerUrl: registry.issuerUrl },
  ...over,
});

describeProviderConformance("oci.registry", () => createOciRegistryAdapter(providerOf()), {
  stateful: true,
  wrongCredential: (b) => ({ ...b, password: `${b.password}x` }),
  unreachable: {
    makeAdapter: () =>
      createOciRegistryAdapter(providerOf({ endpoint: `http://127.0.0.1:${deadPort}`, options: { issuerUrl: `http://127.0.0.1:${deadPort}` } })),
    bindings: (b) => ({ ...b, url: `http://127.0.0.1:${deadPort}`, port: String(deadPort) }),
  },
});
