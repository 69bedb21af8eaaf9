/**
 * `npm run release`: builds the release of the version every workspace's package.json names,
 * into dist-release/:
 *
 * - `mesh-meshctl-X.Y.Z.tgz`, an npm package: `npm install -g ./mesh-meshctl-X.Y.Z.tgz` puts
 *   `meshctl` and each service (`mesh-resolver`, `mesh-agent`, …) on the PATH;
 * - `mesh-bundles-X.Y.Z.tar.gz`, the same programs for machines without npm: one directory,
 *   `mesh-X.Y.Z/`, each program one file that `node` runs alone;
 * - `mesh-client-X.Y.Z.tgz`, the SDK (`@mesh/client`) as a package of its own for modules to
 *   depend on: its code and @mesh/shared's (private, published nowhere) bundled into it, its
 *   third-party packages left as dependencies (see `packClient` below for why this one differs);
 * - `SHA256SUMS` of all three, in the format `sha256sum -c SHA256SUMS` checks.
 *
 * The first two carry the same files: each program bundled by esbuild into one ES module with every
 * package it uses inside (the workspaces and the third-party ones alike), `meshctl.mjs` beside
 * `mesh-<service>.mjs` (meshctl up starts the services from there: packages/cli/src/paths.ts),
 * the release's version baked in (packages/shared/src/release-version.ts), and meshctl's
 * examples and console assets inside it (packages/cli/src/release-build.ts); with them
 * deploy/ (the systemd units and NATS configurations, and how to use them), docs/ and schemas/
 * (which deploy/README.md links to), LICENSE, CHANGELOG.md and the licenses of the packages
 * inside the bundles.
 *
 * Why the npm package declares no dependencies and carries the bundles instead:
 * - the workspaces (@mesh/shared, @mesh/providers, …) are private and published nowhere, so
 *   they have to be inside the package whichever way it is made;
 * - the tests run against the versions package-lock.json pins, and a bundle keeps them: the
 *   release is what was tested. Declared dependencies would be resolved again at each install,
 *   and the repository resolves two versions of @opentelemetry/api side by side (@mesh/shared's
 *   ^1.10 and the tracing SDK's peer range <1.10, packages/telemetry/src/start-tracing.ts), which
 *   one flat set of declared dependencies cannot give: npm would either refuse the conflict or
 *   run @mesh/shared on a version it was never tested with;
 * - one build serves both artifacts, and an install needs no registry.
 * The cost: a fix in a third-party package reaches users with the next release, not with a
 * reinstall; THIRD-PARTY-LICENSES.txt says which packages, at which versions, are inside.
 *
 * Nothing native is inside: esbuild fails on a `.node` addon, and the drivers are pure
 * JavaScript (pg's optional native binding, `pg-native`, is left out: pg loads it only when
 * asked for `pg.native`, which the mesh never is). The services log through pino to a file
 * descriptor, never through its worker-thread transports, whose worker files a bundle lacks.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { build, type Metafile, type Plugin } from "esbuild";
import { rollup } from "rollup";
import { dts } from "rollup-plugin-dts";

const root = fileURLToPath(new URL("../", import.meta.url));
const out = join(root, "dist-release");

/** Ends the release, saying what went wrong and what to do. */
function fail(message: string): never {
  console.error(`release: ${message}`);
  process.exit(1);
}

/** Runs a command in the repository, its output shown; fails the release, naming it, when it fails. */
function runShown(cmd: string, args: string[], cwd = root): void {
  try {
    execFileSync(cmd, args, { cwd, stdio: "inherit" });
  } catch {
    fail(`\`${cmd} ${args.join(" ")}\` failed (its output is above); fix that and run npm run release again`);
  }
}

/** A command's standard output, trimmed; undefined when it fails. */
function output(cmd: string, args: string[], cwd = root): string | undefined {
  try {
    return execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).trim();
  } catch {
    return undefined;
  }
}

/** The version every workspace names; fails when they differ or it is not X.Y.Z. */
function releaseVersion(): string {
  const workspaces = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { workspaces: string[] }).workspaces;
  const versions = new Map(workspaces.map((w) => [w, (JSON.parse(readFileSync(join(root, w, "package.json"), "utf8")) as { version?: string }).version]));
  const version = versions.get("packages/cli");
  const other = [...versions].filter(([, v]) => v !== version);
  if (!version || other.length)
    fail(
      `the workspaces name different versions (packages/cli: ${version ?? "none"}; ${other.map(([w, v]) => `${w}: ${v ?? "none"}`).join(", ")}): ` +
        "give every workspace's package.json the release's version (CONTRIBUTING.md, \"Releasing\")",
    );
  if (!/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/.test(version)) fail(`the version ${version} is not X.Y.Z (or X.Y.Z-PRE): fix it in every workspace's package.json`);
  return version;
}

/** Every file below `dir`, by its path relative to `dir` with `/` separators. */
function filesBelow(dir: string): Record<string, string> {
  const files: Record<string, string> = {};
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else files[relative(dir, p).split("\\").join("/")] = readFileSync(p, "utf8");
    }
  };
  walk(dir);
  return files;
}

// A bundle is an ES module; the CommonJS packages inside call require() for Node's own modules
// and read __dirname (ioredis, for its own package.json, in a try), which an ES module lacks.
const BANNER = [
  'import { createRequire as __meshCreateRequire } from "node:module";',
  'import { fileURLToPath as __meshFileURLToPath } from "node:url";',
  'import { dirname as __meshDirname } from "node:path";',
  "const require = __meshCreateRequire(import.meta.url);",
  "const __filename = __meshFileURLToPath(import.meta.url);",
  "const __dirname = __meshDirname(__filename);",
].join("\n");

/** Bundles the build of `entry` into `outfile`; returns what went in. */
async function bundle(entry: string, outfile: string, define: Record<string, string>): Promise<Metafile> {
  const result = await build({
    entryPoints: [join(root, entry)],
    outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    define,
    banner: { js: BANNER },
    external: ["pg-native"],
    metafile: true,
    logLevel: "warning",
  }).catch(() =>
    fail(
      `esbuild could not bundle ${entry} (its errors are above). A package that cannot be bundled (a native addon, a require of a computed name) ` +
        "must be made external here with what loads it at run time, or replaced",
    ),
  );
  return result.metafile;
}

/** The packages of node_modules that went into the bundles, each with its license text. */
function thirdPartyLicenses(metafiles: Metafile[]): string {
  const dirs = new Set<string>();
  for (const m of metafiles) {
    for (const input of Object.keys(m.inputs)) {
      const at = /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(input);
      if (at) dirs.add(at[1]!);
    }
  }
  const entries = [...dirs].map((dir) => {
    const pkg = JSON.parse(readFileSync(join(root, dir, "package.json"), "utf8")) as { name: string; version: string; license?: string };
    const file = readdirSync(join(root, dir)).find((f) => /^(licen[cs]e|copying)(\.|$)/i.test(f));
    const text = file
      ? readFileSync(join(root, dir, file), "utf8").trim()
      : `(the package has no license file; its package.json says: ${pkg.license ?? "nothing"})`;
    return { id: `${pkg.name}@${pkg.version}`, license: pkg.license ?? "unknown", text };
  });
  const unique = [...new Map(entries.map((e) => [e.id, e])).values()].sort((a, b) => a.id.localeCompare(b.id));
  return [
    "The programs of this release are bundles: each carries, inside, the packages listed here, at these",
    "versions. Each package's license follows its name.",
    "",
    ...unique.map((e) => `- ${e.id} (${e.license})`),
    "",
    ...unique.flatMap((e) => ["=".repeat(78), `${e.id} (${e.license})`, "", e.text, ""]),
  ].join("\n");
}

/** The README of both artifacts: what is in them and where the documentation is. */
function readme(version: string, programs: string[]): string {
  return [
    `# provisioning-mesh ${version}`,
    "",
    "The provisioning core of a self-hosted service mesh, on NATS JetStream: this release's programs, each",
    "one file that Node.js 20 or later runs with nothing else installed:",
    "",
    ...programs.map((p) => `- \`${p}\``),
    "",
    "`meshctl.mjs` starts the services from the files beside it: keep them together. Installed with",
    "`npm install -g ./mesh-meshctl-" + version + ".tgz`, each is on the PATH without its `.mjs`",
    "(`meshctl`, `mesh-resolver`, …).",
    "",
    "To try it: `meshctl example shop`, then the `meshctl up -f …` it prints (it needs `nats-server`",
    "and a PostgreSQL server on 127.0.0.1:5432). To run the services apart, under systemd:",
    "deploy/README.md. Everything else: docs/ (docs/README.md lists it). What changed: CHANGELOG.md.",
    "The packages inside the bundles and their licenses: THIRD-PARTY-LICENSES.txt.",
    "",
  ].join("\n");
}

/** The package a bare import names (`@nats-io/kv` of `@nats-io/kv/lib/x.js`); undefined for a path or one of Node's own. */
function packageOfImport(spec: string): string | undefined {
  if (spec.startsWith(".") || spec.startsWith("/") || spec.startsWith("node:")) return undefined;
  const parts = spec.split("/");
  return spec.startsWith("@") ? `${parts[0]}/${parts[1]}` : parts[0];
}

/** Inside the SDK's package: its own code and @mesh/shared's. Every other package it imports stays a dependency. */
const isInlined = (spec: string) => packageOfImport(spec) === "@mesh/shared";

/** Leaves every import of a package outside the SDK's package to be resolved at run time. */
const thirdPartyExternal: Plugin = {
  name: "third-party-external",
  setup(b) {
    b.onResolve({ filter: /^[^./]/ }, (a) => (isInlined(a.path) ? undefined : { path: a.path, external: true }));
  },
};

/**
 * The SDK's npm package, `mesh-client-X.Y.Z.tgz` in `out`; returns its file name. Unlike
 * meshctl's, it declares dependencies: an application installs it beside its own packages, which
 * must be the very copies the SDK uses (one `@opentelemetry/api`, whose global tracer provider
 * the application registers; one NATS client), and it must not carry what the SDK never loads
 * (pino, the providers' drivers). So only @mesh/shared, which is published nowhere, goes inside:
 * esbuild bundles the build of packages/client with it (split at the dynamic import of the YAML
 * parser, so `yaml` still loads only for a manifest's text), and rollup-plugin-dts does the same
 * for its types. Its dependencies are exactly the packages the bundle imports, read from
 * esbuild's metafile, at the ranges packages/client and packages/shared ask for.
 */
async function packClient(version: string, engines: Record<string, string>): Promise<string> {
  const dir = join(out, "client-package");
  const result = await build({
    entryPoints: { index: join(root, "packages/client/dist/index.js") },
    outdir: dir,
    bundle: true,
    splitting: true,
    chunkNames: "chunks/[name]-[hash]",
    platform: "node",
    format: "esm",
    target: "node20",
    plugins: [thirdPartyExternal],
    metafile: true,
    logLevel: "warning",
  }).catch(() => fail("esbuild could not bundle packages/client/dist/index.js (its errors are above)"));
  const imported = new Set<string>();
  for (const o of Object.values(result.metafile.outputs))
    for (const i of o.imports) if (i.external && packageOfImport(i.path)) imported.add(packageOfImport(i.path)!);

  const types = await rollup({
    input: join(root, "packages/client/dist/index.d.ts"),
    // respectExternal: packages' types are followed, and inlined unless `external` says otherwise.
    // The client's tsconfig: NodeNext resolution, which reads @mesh/shared's `exports` (its /runtime entry).
    plugins: [dts({ respectExternal: true, tsconfig: join(root, "packages/client/tsconfig.json") })],
    external: (id) => packageOfImport(id) !== undefined && !isInlined(id),
  }).catch((e: unknown) => fail(`rollup-plugin-dts could not bundle packages/client/dist/index.d.ts: ${e instanceof Error ? e.message : String(e)}`));
  const typesOut = await types.write({ file: join(dir, "index.d.ts"), format: "es" });
  await types.close();
  const typesImport = new Set(
    typesOut.output
      .flatMap((c) => (c.type === "chunk" ? c.imports : []))
      .map(packageOfImport)
      .filter((p) => p !== undefined),
  );

  const [client, shared] = ["packages/client", "packages/shared"].map(
    (w) => JSON.parse(readFileSync(join(root, w, "package.json"), "utf8")) as { description: string; dependencies: Record<string, string> },
  );
  const rangeOf = (name: string) => client!.dependencies[name] ?? shared!.dependencies[name];
  const dependencies = Object.fromEntries(
    [...imported]
      .sort()
      .map((name) => [name, rangeOf(name) ?? fail(`the SDK's bundle imports ${name}, which neither packages/client nor packages/shared lists`)]),
  );
  const untyped = [...typesImport].filter((p) => !(p in dependencies));
  if (untyped.length)
    fail(
      `the SDK's types import ${untyped.join(", ")}, which its code does not: an installed SDK would not find those types; import them in code too, or keep them out of its API`,
    );
  const pkg = {
    name: "@mesh/client",
    version,
    description: client!.description,
    license: "Apache-2.0",
    type: "module",
    main: "./index.js",
    types: "./index.d.ts",
    exports: { ".": { types: "./index.d.ts", default: "./index.js" } },
    engines,
    dependencies,
  };
  writeFileSync(join(dir, "package.json"), `${JSON.stringify(pkg, null, 2)}\n`);
  cpSync(join(root, "packages/client/README.md"), join(dir, "README.md"));
  cpSync(join(root, "LICENSE"), join(dir, "LICENSE"));
  return packDir(dir);
}

/** `npm pack` of the package in `dir` into `out`, then `dir` removed; returns the tarball's file name. */
function packDir(dir: string): string {
  const packed = output("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", out], dir);
  const tarball = packed && (JSON.parse(packed) as Array<{ filename: string }>)[0]?.filename;
  if (!tarball || !existsSync(join(out, tarball))) fail(`npm pack made no tarball in ${out} (it printed: ${packed ?? "nothing"}); run it in ${dir} to see why`);
  rmSync(dir, { recursive: true });
  return tarball;
}

const version = releaseVersion();
const tag = `v${version}`;
if (!(output("git", ["tag", "--points-at", "HEAD"]) ?? "").split("\n").includes(tag))
  console.warn(`release: note: this commit is not tagged ${tag}; a published release is built from its tag (CONTRIBUTING.md, "Releasing")`);
if (output("git", ["status", "--porcelain"])) console.warn("release: note: the work tree has uncommitted changes; this build is not what any commit holds");

console.log("building every workspace (tsc -b)…");
runShown(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), "-b"]);
// After the build: meshctl's module reaches the other workspaces through their dist/.
const { bundleFileOf } = await import("../packages/cli/src/paths.js");

rmSync(out, { recursive: true, force: true });
const tree = join(out, `mesh-${version}`);
mkdirSync(tree, { recursive: true });

const versionDefine = { MESH_RELEASE_VERSION: JSON.stringify(version) };
// The manifests alone: examples/app is a program of its own (with its build), which `meshctl example` never writes.
const exampleManifests = Object.fromEntries(Object.entries(filesBelow(join(root, "examples"))).filter(([path]) => path.endsWith(".yaml")));
const meshctlBuild = {
  examples: exampleManifests,
  consoleAssets: filesBelow(join(root, "packages/cli/assets")),
  schemas: { "Manifest.schema.json": readFileSync(join(root, "schemas/Manifest.schema.json"), "utf8") },
};
const programs: Array<{ file: string; entry: string; define: Record<string, string> }> = [
  { file: bundleFileOf("meshctl"), entry: "packages/cli/dist/main.js", define: { ...versionDefine, MESH_RELEASE_BUILD: JSON.stringify(meshctlBuild) } },
  ...(["resolver", "provisioner", "verifier", "rotator", "agent", "oci-token-issuer"] as const).map((s) => ({
    file: bundleFileOf(s),
    entry: `services/${s}/dist/main.js`,
    define: versionDefine,
  })),
];
const metafiles: Metafile[] = [];
for (const p of programs) {
  console.log(`bundling ${p.entry} → ${p.file}`);
  metafiles.push(await bundle(p.entry, join(tree, p.file), p.define));
}

// A bundle that does not load, or reports another version, ends the release here.
const reported = output(process.execPath, [join(tree, bundleFileOf("meshctl")), "--version"], tree);
if (reported !== version)
  fail(
    `the bundled meshctl printed ${JSON.stringify(reported)} for --version, not ${version}: run it (node ${join(tree, bundleFileOf("meshctl"))} --version) to see why`,
  );

for (const d of ["deploy", "docs", "schemas"]) cpSync(join(root, d), join(tree, d), { recursive: true });
for (const f of ["LICENSE", "CHANGELOG.md"]) cpSync(join(root, f), join(tree, f));
writeFileSync(join(tree, "THIRD-PARTY-LICENSES.txt"), thirdPartyLicenses(metafiles));
writeFileSync(
  join(tree, "README.md"),
  readme(
    version,
    programs.map((p) => p.file),
  ),
);

// The bundles' archive, reproducible: names sorted, owners and times fixed (the commit's).
const epoch = output("git", ["log", "-1", "--format=%ct"]) ?? "0";
const bundlesArchive = `mesh-bundles-${version}.tar.gz`;
runShown(
  "tar",
  ["--sort=name", `--mtime=@${epoch}`, "--owner=0", "--group=0", "--numeric-owner", "-cf", `mesh-bundles-${version}.tar`, `mesh-${version}`],
  out,
);
runShown("gzip", ["-n", "-9", `mesh-bundles-${version}.tar`], out);

// The npm package: the same tree with a package.json whose bins are the bundles.
const pkgDir = join(out, "npm-package");
cpSync(tree, pkgDir, { recursive: true });
// The Node.js versions the repository's suite runs on (.ci/run), as its root package.json says.
const engines = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { engines: Record<string, string> }).engines;
const bin = Object.fromEntries(programs.map((p) => [p.file.replace(/\.mjs$/, ""), p.file]));
const pkg = {
  name: "@mesh/meshctl",
  version,
  description: "meshctl and the services of the provisioning mesh, each bundled into one file (see README.md).",
  license: "Apache-2.0",
  type: "module",
  engines,
  bin,
};
writeFileSync(join(pkgDir, "package.json"), `${JSON.stringify(pkg, null, 2)}\n`);
const tarball = packDir(pkgDir);
rmSync(tree, { recursive: true });

console.log("bundling the SDK, packages/client, with @mesh/shared inside");
const clientTarball = await packClient(version, engines);

const artifacts = [tarball, bundlesArchive, clientTarball];
const sums = artifacts.map(
  (f) =>
    `${createHash("sha256")
      .update(readFileSync(join(out, f)))
      .digest("hex")}  ${f}`,
);
writeFileSync(join(out, "SHA256SUMS"), `${sums.join("\n")}\n`);

console.log(`\nrelease ${version} in ${relative(process.cwd(), out) || "."}/:`);
for (const f of artifacts) console.log(`  ${f.padEnd(32)} ${(statSync(join(out, f)).size / 1e6).toFixed(1)} MB`);
console.log(`  SHA256SUMS: check them with (cd ${relative(process.cwd(), out) || "."} && sha256sum -c SHA256SUMS)`);
