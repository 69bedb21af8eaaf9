/**
 * `meshctl example [NAME]`: writes a set of the repository's example manifests (examples/)
 * into the working directory, at the same paths, so that a meshctl installed from a release
 * can run them as the README does from the repository. A release's meshctl carries the
 * examples inside (release-build.ts); the source tree's reads them from examples/.
 */
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, relative, resolve } from "node:path";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import type { Output } from "./output.js";
import { meshctlCommand } from "./paths.js";
import { carriedFile } from "./release-build.js";

/** One example: what it is, the files it writes (paths below examples/) and what to do next. */
export interface ExampleSet {
  /** What the files declare, in a few words. */
  about: string;
  /** Paths below examples/, written at the same paths below the working directory; the order `-f` takes them in. */
  files: readonly string[];
  /**
   * What to run once they are written: the meshctl command (`up`), followed by `-f` and each
   * file when `withFiles`; `note` is said before it.
   */
  next: { command: string; withFiles: boolean; note?: string };
}

const PROVIDER_FILES = ["postgres", "mariadb", "redis", "rabbitmq", "nats", "oci-registry", "npm"].map((k) => `providers/${k}.yaml`);

/** Every example `meshctl example` writes, by name. */
export const EXAMPLES: Readonly<Record<string, ExampleSet>> = {
  shop: {
    about: "module shop (a PostgreSQL database and a generated secret for its api part) and provider pg-main, the PostgreSQL server at 127.0.0.1:5432",
    files: ["providers/postgres.yaml", "shop.yaml"],
    next: {
      command: "up",
      withFiles: true,
      note: "providers/postgres.yaml names the server at 127.0.0.1:5432 with the admin postgres and no password (trusted local connections): edit it first for another server",
    },
  },
  nothing: {
    about: "module static-site, which requires nothing: once processed its state is NothingRequired",
    files: ["nothing.yaml"],
    next: { command: "up", withFiles: true },
  },
  providers: {
    about:
      "a Provider document of each kind (PostgreSQL, MariaDB, Redis, RabbitMQ, NATS, an OCI registry, an npm registry), commented, to edit for your servers",
    files: PROVIDER_FILES,
    next: {
      command: "apply -f providers/NAME.yaml",
      withFiles: false,
      note: "edit the ones for your servers first (each file's comments say how), then apply them to a running mesh",
    },
  },
};

/** What `--help` says of the examples: each name and the files it writes, a directory's many files as `DIR/*.yaml`. */
export function examplesHelp(): string {
  const shown = (files: readonly string[]) => {
    const dirs = new Set(files.map((f) => dirname(f)));
    return files.length > 2 && dirs.size === 1 ? `${[...dirs][0]}/*.yaml` : files.join(" and ");
  };
  return Object.entries(EXAMPLES)
    .map(([name, set]) => `${name} writes ${shown(set.files)}`)
    .join("; ");
}

/** The first line of every example: where an editor (the YAML language server) finds the schema that explains it. */
const MODELINE = /^# yaml-language-server: \$schema=\S+\n/;

/**
 * The manifest schema written beside the examples, so that their modelines point at a file
 * that is there: the repository's is below schemas/, which a directory of examples lacks.
 */
export const EXAMPLE_SCHEMA = "manifest.schema.json";

/**
 * The text of example file `path` (below examples/) as written: the release build's copy, else
 * the repository's, its modeline pointing at {@link EXAMPLE_SCHEMA} written beside it.
 */
function exampleText(path: string): string {
  const text = carriedFile("examples", path, new URL(`../../../examples/${path}`, import.meta.url));
  return text.replace(MODELINE, `# yaml-language-server: $schema=${relative(dirname(resolve("/", path)), resolve("/", EXAMPLE_SCHEMA))}\n`);
}

/** The schema an example's modeline names: the release build's copy, else the repository's. */
function schemaText(): string {
  return carriedFile("schemas", "Manifest.schema.json", new URL("../../../schemas/Manifest.schema.json", import.meta.url));
}

export interface ExampleOptions {
  /** The example's name; none lists them. */
  name?: string;
  /** Overwrite files that exist and differ. */
  force?: boolean;
  /** Where to write (default: the working directory). */
  cwd?: string;
}

/**
 * Writes example `name` into `cwd`, or lists every example when no name is given. All or
 * nothing: a file that exists and differs from the example is refused (exit 1, nothing
 * written) unless `force`; one that holds the example already is left as it is. An unknown
 * name is a usage error (exit 2).
 */
export function runExample(opts: ExampleOptions, out: Output): number {
  if (opts.name === undefined) {
    out.out("examples (meshctl example NAME writes one into the working directory):");
    for (const [name, set] of Object.entries(EXAMPLES)) out.out(`  ${name.padEnd(10)} ${set.about}\n  ${"".padEnd(10)} writes ${set.files.join(", ")}`);
    return ExitCodes.Ok;
  }
  const set = EXAMPLES[opts.name];
  if (!set)
    throw new CliError(
      `there is no example ${JSON.stringify(opts.name)}: give one of ${Object.keys(EXAMPLES).join(", ")} (meshctl example lists them)`,
      ExitCodes.Usage,
    );
  const cwd = opts.cwd ?? process.cwd();
  const plan = [...set.files.map((path) => ({ path, text: exampleText(path) })), { path: EXAMPLE_SCHEMA, text: schemaText() }].map(({ path, text }) => {
    const target = resolve(cwd, path);
    if (!existsSync(target)) return { path, target, text, state: "new" as const };
    if (!statSync(target).isFile())
      throw new CliError(`${path} exists here and is not a file; nothing was written. Move it away, or run meshctl example ${opts.name} in another directory.`);
    return { path, target, text, state: readFileSync(target, "utf8") === text ? ("same" as const) : ("differs" as const) };
  });
  const differing = plan.filter((f) => f.state === "differs").map((f) => f.path);
  if (differing.length && !opts.force) {
    throw new CliError(
      `${differing.join(", ")} already ${differing.length === 1 ? "exists" : "exist"} here with other contents; nothing was written. ` +
        `Give --force to overwrite ${differing.length === 1 ? "it" : "them"} with the example, or run meshctl example ${opts.name} in another directory.`,
    );
  }
  for (const f of plan) {
    if (f.state === "same") {
      out.out(`${f.path} is already here, unchanged`);
      continue;
    }
    mkdirSync(dirname(f.target), { recursive: true });
    writeFileSync(f.target, f.text);
    out.out(`${f.state === "new" ? "wrote" : "overwrote"} ${f.path}`);
  }
  const files = set.next.withFiles ? set.files.map((f) => ` -f ${f}`).join("") : "";
  if (set.next.note) out.out(`${set.next.note}.`);
  out.out(`next: ${meshctlCommand()} ${set.next.command}${files}`);
  return ExitCodes.Ok;
}
