import { defineConfig } from "vitest/config";
import { fileURLToPath } from "node:url";

const src = (p: string) => fileURLToPath(new URL(p, import.meta.url));

// Workspace packages resolve to their sources, so tests never run against a stale build.
export default defineConfig({
  resolve: {
    // Exact names: "@mesh/shared" must not also catch "@mesh/shared/runtime".
    alias: Object.entries({
      "@mesh/shared": "./packages/shared/src/index.ts",
      "@mesh/shared/runtime": "./packages/shared/src/runtime.ts",
      "@mesh/shared/service": "./packages/shared/src/service.ts",
      "@mesh/shared/manifest-text": "./packages/shared/src/manifest-text.ts",
      "@mesh/providers": "./packages/providers/src/index.ts",
      "@mesh/client": "./packages/client/src/index.ts",
      "@mesh/telemetry": "./packages/telemetry/src/index.ts",
      "@mesh/resolver": "./services/resolver/src/index.ts",
      "@mesh/resolver/main": "./services/resolver/src/main.ts",
      "@mesh/provisioner": "./services/provisioner/src/index.ts",
      "@mesh/provisioner/main": "./services/provisioner/src/main.ts",
      "@mesh/agent": "./services/agent/src/index.ts",
      "@mesh/agent/main": "./services/agent/src/main.ts",
      "@mesh/verifier": "./services/verifier/src/index.ts",
      "@mesh/verifier/main": "./services/verifier/src/main.ts",
      "@mesh/rotator": "./services/rotator/src/index.ts",
      "@mesh/rotator/main": "./services/rotator/src/main.ts",
      "@mesh/oci-token-issuer": "./services/oci-token-issuer/src/index.ts",
      "@mesh/cli": "./packages/cli/src/index.ts",
    }).map(([name, path]) => ({ find: new RegExp(`^${name.replace(/[/]/g, "\\/")}$`), replacement: src(path) })),
  },
  test: {
    // Prepares what the tests need of the machine (packages, a RabbitMQ of the run's own): test/global-setup.ts.
    globalSetup: ["./test/global-setup.ts"],
    // Projects: `unit` (pure logic beside the code), `integration` (test/, one server each),
    // `cluster` (test/cluster/: the mesh on a three-server cluster under real faults, the ones
    // that fit CI), and `faults` (test/cluster/faults/: the long ones, `npm run test:faults`,
    // which sets MESH_FAULTS=1; left out of `npm test` otherwise).
    projects: [
      {
        extends: true as const,
        test: {
          name: "unit",
          include: ["packages/*/src/**/*.test.ts", "services/*/src/**/*.test.ts", "examples/*/src/**/*.test.ts"],
          sequence: { groupOrder: 0 },
        },
      },
      { extends: true as const, test: { name: "integration", include: ["test/**/*.test.ts"], exclude: ["test/cluster/**"], sequence: { groupOrder: 0 } } },
      // Each file runs a cluster of three servers and a mesh twice over, which on two cores is
      // the whole machine: they run after the other projects, one file at a time, so neither
      // they nor an integration test beside them wait out their bounds on a starved CPU.
      {
        extends: true as const,
        test: {
          name: "cluster",
          include: ["test/cluster/*.test.ts"],
          testTimeout: 300_000,
          hookTimeout: 300_000,
          sequence: { groupOrder: 1 },
          poolOptions: { forks: { singleFork: true } },
        },
      },
      ...(process.env.MESH_FAULTS === "1"
        ? [
            {
              extends: true as const,
              test: {
                name: "faults",
                include: ["test/cluster/faults/*.test.ts"],
                testTimeout: 600_000,
                hookTimeout: 300_000,
                sequence: { groupOrder: 2 },
                poolOptions: { forks: { singleFork: true } },
              },
            },
          ]
        : []),
    ],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Integration tests start their own servers; two cores, so keep files from piling up.
    maxWorkers: 2,
    minWorkers: 1,
    reporters: ["default"],
  },
});
