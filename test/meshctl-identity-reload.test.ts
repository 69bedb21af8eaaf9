/**
 * meshctl connecting while the server reloads its configuration: an identity the server refuses
 * is offered again for a moment before meshctl says so (nats-server 2.9.10 in operator mode
 * refused the admin's own identity during a reload of its certificate), so an identity the
 * reload brings in is taken; one it never knows is still refused, said as before. On a server
 * of the test's own whose users change by a reload.
 */
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runMeshctl } from "./harness/bootstrapped-mesh.js";
import { startNatsServer, writeServerConfig, type NatsServer } from "./harness/nats-server.js";
import { scratchDir } from "./harness/scratch.js";
import { waitFor } from "./harness/wait.js";

let server: NatsServer | undefined;
afterAll(async () => {
  await server?.stop();
});

const config = (storeDir: string, users: string[]) =>
  `jetstream { store_dir: ${JSON.stringify(storeDir)} }\nauthorization { users: [ ${users.map((u) => `{ user: ${u}, password: pw }`).join(", ")} ] }\n`;

describe("meshctl and an identity the server refuses", () => {
  it("is offered again while the server reloads, and taken once the reload knows it; one never known is refused, saying so", async () => {
    const dir = scratchDir("mesh-identity-reload-");
    const configFile = join(dir, "nats.conf");
    const storeDir = join(dir, "store");
    writeServerConfig(configFile, config(storeDir, ["someone"]));
    server = await startNatsServer({ configFile, storeDir });
    const as = (user: string) => ({
      ...process.env,
      NO_COLOR: "1",
      NATS_URL: server!.url,
      MESH_NATS_CREDENTIALS: "",
      MESH_NATS_USER: user,
      MESH_NATS_PASSWORD: "pw",
    });

    const status = runMeshctl(scratchDir("mesh-meshctl-"), ["status", "--json"], as("mesh"));
    // meshctl's first handshake is refused (user mesh is not known yet), then the reload brings it in.
    await waitFor(
      "the server to refuse meshctl once",
      async () => {
        const closed = (await (await fetch(`http://127.0.0.1:${server!.monitorPort}/connz?state=closed`)).json()) as {
          connections?: Array<{ reason?: string }>;
        };
        return closed.connections?.some((c) => c.reason === "Authentication Failure") || undefined;
      },
      20_000,
      20,
    );
    writeServerConfig(configFile, config(storeDir, ["someone", "mesh"]));
    process.kill(server.pid, "SIGHUP");
    const r = await status;
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).not.toContain("refused this process's identity");

    const stranger = await runMeshctl(scratchDir("mesh-meshctl-"), ["status"], as("stranger"));
    expect(stranger.code).toBe(1);
    expect(stranger.stderr).toMatch(/NATS at nats:\/\/127\.0\.0\.1:\d+ refused this process's identity \(Authorization Violation\)/);
  });
});
