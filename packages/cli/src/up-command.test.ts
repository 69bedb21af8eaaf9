import { describe, expect, it } from "vitest";
import { chooseNodes, displayPath, monitorExposureLine, parseMetricsListen, parseNatsMonitor, serviceSpecs, withMetricsListen } from "./up-command.js";
import { isCliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import { loopbackAddress } from "./local-nats.js";
import { upPaths } from "./paths.js";
import { allowedHooksOf, parseAllowedHooks } from "@mesh/shared";
import type { ManifestFile } from "./manifest-files.js";

const files: ManifestFile[] = [
  {
    source: "shop.yaml",
    documents: [
      {
        kind: "Module",
        name: "shop",
        parts: [
          { name: "api", node: "node-a", installed: true },
          { name: "worker", node: "node-b", installed: false },
        ],
        requires: [],
      },
    ],
  },
];

describe("chooseNodes", () => {
  it("takes --nodes, else the nodes of the applied parts, else node-a", () => {
    expect(chooseNodes(["x", "y", "x"], files)).toEqual(["x", "y"]);
    expect(chooseNodes(undefined, files)).toEqual(["node-a", "node-b"]);
    expect(chooseNodes([], [])).toEqual(["node-a"]);
  });
});

describe("serviceSpecs", () => {
  it("runs resolver, provisioner and one agent per node with its own bindings root and log", () => {
    const paths = upPaths({ cwd: "/work/demo" });
    const specs = serviceSpecs({ main: (name) => `/opt/mesh/mesh-${name}.mjs`, paths, natsUrl: "nats://127.0.0.1:4222", nodes: ["node-a", "node-b"] });
    expect(specs.map((s) => s.name)).toEqual(["resolver", "provisioner", "verifier", "rotator", "agent node-a", "agent node-b"]);
    expect(specs[0]!.script).toBe("/opt/mesh/mesh-resolver.mjs");
    // Every service knows where the mesh's own files are; an agent's bindings root is its node's.
    expect(specs[0]!.env).toMatchObject({
      MESH_STATE_DIR: "/work/demo/.mesh",
      MESH_BINDINGS_ROOT: "/work/demo/.mesh/bindings",
      MESH_MASTER_KEY_FILE: "/work/demo/.mesh/master.key",
    });
    expect(specs.at(-1)).toMatchObject({
      script: "/opt/mesh/mesh-agent.mjs",
      logFile: "/work/demo/.mesh/logs/agent-node-b.log",
      env: {
        NATS_URL: "nats://127.0.0.1:4222",
        MESH_NODE: "node-b",
        MESH_BINDINGS_ROOT: "/work/demo/.mesh/bindings/node-b",
        MESH_MASTER_KEY_FILE: "/work/demo/.mesh/master.key",
      },
    });
    expect(upPaths({ cwd: "/w", bindings: "/srv/b" }).bindings).toBe("/srv/b");
  });

  it("gives each service its metrics address with --metrics-listen: the first at the port given, the others after it", () => {
    const specs = serviceSpecs({
      main: (name) => `/opt/mesh/mesh-${name}.mjs`,
      paths: upPaths({ cwd: "/w" }),
      natsUrl: "nats://127.0.0.1:4222",
      nodes: ["node-a"],
    });
    // Off unless asked for: an inherited MESH_METRICS_LISTEN would have every service try the same port.
    expect(specs.every((s) => s.env.MESH_METRICS_LISTEN === "")).toBe(true);
    expect(withMetricsListen(specs, parseMetricsListen("127.0.0.1:9464")).map((s) => [s.name, s.env.MESH_METRICS_LISTEN])).toEqual([
      ["resolver", "127.0.0.1:9464"],
      ["provisioner", "127.0.0.1:9465"],
      ["verifier", "127.0.0.1:9466"],
      ["rotator", "127.0.0.1:9467"],
      ["agent node-a", "127.0.0.1:9468"],
    ]);
    expect(withMetricsListen(specs, parseMetricsListen("[::1]:0")).map((s) => s.env.MESH_METRICS_LISTEN)).toEqual(Array(5).fill("[::1]:0"));
    expect(() => parseMetricsListen("9464")).toThrow(/--metrics-listen "9464" is not HOST:PORT; give e.g. 127.0.0.1:9464/);
    expect(() => withMetricsListen(specs, parseMetricsListen("127.0.0.1:65533"))).toThrow(/take ports 65533 to 65537; give a lower port/);
  });

  it("gives every agent, and only the agents, the hooks and the hook user", () => {
    const hooks = parseAllowedHooks(["reload=/usr/bin/systemctl reload nginx", "flush=/usr/local/bin/flush"]);
    const specs = serviceSpecs({
      main: (name) => `/opt/mesh/mesh-${name}.mjs`,
      paths: upPaths({ cwd: "/w" }),
      natsUrl: "nats://127.0.0.1:4222",
      nodes: ["node-a", "node-b"],
      hooks,
      hookUser: "mesh-hooks",
    });
    for (const s of specs) {
      if (s.name.startsWith("agent ")) {
        expect(s.env).toMatchObject({ MESH_ALLOW_HOOKS: "reload=/usr/bin/systemctl reload nginx;flush=/usr/local/bin/flush", MESH_HOOK_USER: "mesh-hooks" });
        expect(allowedHooksOf([], s.env)).toEqual(hooks);
      } else {
        expect(s.env.MESH_ALLOW_HOOKS).toBeUndefined();
      }
    }
  });
});

describe("loopbackAddress and displayPath", () => {
  it("recognises a single loopback URL only", () => {
    expect(loopbackAddress("nats://127.0.0.1:4222")).toEqual({ host: "127.0.0.1", port: 4222 });
    expect(loopbackAddress("nats://localhost")).toEqual({ host: "127.0.0.1", port: 4222 });
    expect(loopbackAddress("127.0.0.1:14222")).toEqual({ host: "127.0.0.1", port: 14222 });
    expect(loopbackAddress("nats://10.0.0.5:4222")).toBeUndefined();
    expect(loopbackAddress("nats://127.0.0.1:4222,nats://127.0.0.1:4223")).toBeUndefined();
  });
  it("shows paths inside the working directory relative to it", () => {
    expect(displayPath("/w", "/w/.mesh/logs")).toBe(".mesh/logs");
    expect(displayPath("/w", "/srv/b")).toBe("/srv/b");
  });
});

describe("parseNatsMonitor (--nats-monitor)", () => {
  it.each([
    ["127.0.0.1:8222", { host: "127.0.0.1", port: 8222 }],
    ["localhost:0", { host: "127.0.0.1", port: 0 }],
    ["[::1]:8222", { host: "::1", port: 8222 }],
  ])("takes %s, a loopback address the server up starts can serve monitoring on", (spec, addr) => {
    expect(parseNatsMonitor(spec)).toEqual(addr);
  });

  it.each([
    ["8222", /is not HOST:PORT with a port from 0 to 65535; give e\.g\. 127\.0\.0\.1:8222/],
    ["127.0.0.1:65536", /is not HOST:PORT with a port from 0 to 65535/],
    ["127.0.0.1:", /is not HOST:PORT/],
    ["0.0.0.0:8222", /serves monitoring on its own client address, which is loopback; give 127\.0\.0\.1:8222/],
    ["10.0.0.5:8222", /give 127\.0\.0\.1:8222/],
  ])("refuses %s as wrong usage, saying what to give", (spec, message) => {
    let err: unknown;
    try {
      parseNatsMonitor(spec);
    } catch (e) {
      err = e;
    }
    expect(isCliError(err) && err.exitCode).toBe(ExitCodes.Usage);
    expect((err as Error).message).toMatch(message);
  });

  it("warns that the port shows every identity's connections and subscriptions to anyone who reaches it", () => {
    expect(monitorExposureLine("http://127.0.0.1:8222")).toMatch(
      /^WARNING: the NATS monitoring port http:\/\/127\.0\.0\.1:8222 shows every identity's connections and subscriptions .* to anyone who can reach it/,
    );
  });
});
