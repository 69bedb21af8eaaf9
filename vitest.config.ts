import { defineConfig } from "vitest/config";
import { fileURLToPath } from "node:url";

const src = (p: string) => fileURLToPath(new URL(p, import.meta.url));

// Workspace packages resolve to their sources, so tests never run against a stale build.
export default defineConfig({
  resolve: {
    alias: {
      "@mesh/shared": src("./packages/shared/src/index.ts"),
      "@mesh/providers": src("./packages/providers/src/index.ts"),
      "@mesh/client": src("./packages/client/src/index.ts"),
      "@mesh/telemetry": src("./packages/telemetry/src/index.ts"),
      "@mesh/resolver": src("./services/resolver/src/index.ts"),
      "@mesh/provisioner": src("./services/provisioner/src/index.ts"),
      "@mesh/agent": src("./services/agent/src/index.ts"),
      "@mesh/verifier": src("./services/verifier/src/index.ts"),
      "@mesh/rotator": src("./services/rotator/src/index.ts"),
    },
  },
  test: {
    // Prepares what the tests need of the machine (packages, a RabbitMQ of the run's own): test/global-setup.ts.
    globalSetup: ["./test/global-setup.ts"],
    include: ["packages/*/src/**/*.test.ts", "services/*/src/**/*.test.ts", "test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Integration tests start their own servers; two cores, so keep files from piling up.
    maxWorkers: 2,
    minWorkers: 1,
    reporters: ["default"],
  },
});
