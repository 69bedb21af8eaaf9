/**
 * `npm run release`: builds the release of the version every workspace's package.json names,
 * into dist-release/:
 *
 * - `mesh-meshctl-X.Y.Z.tgz`, an npm package: `npm install -g ./mesh-meshctl-X.Y.Z.tgz` puts
 *   `meshctl` and each service (`mesh-resolver`, `mesh-agent`, …) on the PATH;
 * - `mesh-bundles-X.Y.Z.tar.gz`, the same programs for machines without npm: one directory,
 *   `mesh-X.Y.Z/`, each program one file that `node` runs alone;
 * - `SHA256SUMS` of both, in the format `sha256sum -c SHA256SUMS` checks.
 *
 * Both carry the same files: each program bundled by esbuild into one ES module with every
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
import { build, type Metafile } from "esbuild";

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
const meshctlBuild = { examples: exampleManifests, consoleAssets: filesBelow(join(root, "packages/cli/assets")) };
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
const bin = Object.fromEntries(programs.map((p) => [p.file.replace(/\.mjs$/, ""), p.file]));
const pkg = {
  name: "@mesh/meshctl",
  version,
  description: "meshctl and the services of the provisioning mesh, each bundled into one file (see README.md).",
  license: "Apache-2.0",
  type: "module",
  // The Node.js versions the repository's suite runs on (.ci/run), as its root package.json says.
  engines: (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { engines: Record<string, string> }).engines,
  bin,
};
writeFileSync(join(pkgDir, "package.json"), `${JSON.stringify(pkg, null, 2)}\n`);
const packed = output("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", out], pkgDir);
const tarball = packed && (JSON.parse(packed) as Array<{ filename: string }>)[0]?.filename;
if (!tarball || !existsSync(join(out, tarball)))
  fail(`npm pack made no tarball in ${out} (it printed: ${packed ?? "nothing"}); run it in ${pkgDir} to see why`);
rmSync(pkgDir, { recursive: true });
rmSync(tree, { recursive: true });

const artifacts = [tarball, bundlesArchive];
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
