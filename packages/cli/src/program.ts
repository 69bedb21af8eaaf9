/**
 * meshctl's commands: commander wired to the command functions, each of which takes its inputs
 * and an output and returns the exit code. main.ts parses the command line with {@link program};
 * `npm run reference` writes docs/reference/meshctl-options.md from it, so the reference is the
 * definitions here.
 */
import { Command, Option } from "commander";
import {
  MESH_CA_PROVIDER,
  StateFiles,
  errorMessage,
  loadMasterKey,
  meshVersion,
  parseAllowedHooks,
  parseDuration,
  parseTimerDuration,
  type AllowedHooks,
  type MasterKey,
} from "@mesh/shared";
import { isJetStreamTimeout, jetStreamTimeoutMessage, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { caFiles, operatorFiles } from "@mesh/providers";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { hostname, userInfo } from "node:os";
import { runApply } from "./apply-command.js";
import { deleteRequestOf, deleteRequestOfFiles, runDelete } from "./delete-command.js";
import { checkConsoleOptions, runConsole, type ConsoleOptions } from "./console/command.js";
import { DEFAULT_CONSOLE_LISTEN } from "./console/access.js";
import { CliError, isCliError } from "./cli-error.js";
import { connectForCli, firstNatsServer, isNamedServer, jetStreamUnavailableError, natsUrlFrom, openStoreForCli } from "./connect.js";
import { readNatsContext } from "./nats-context.js";
import { EXAMPLES, examplesHelp, runExample } from "./example-command.js";
import { runExplain } from "./explain-command.js";
import { runReissueAgent } from "./reissue-agent-command.js";
import { runAudit, sinceTime } from "./audit-command.js";
import { runAdminAdd, runAdminList, runAdminRemove } from "./admin-command.js";
import { GetResources, checkGetName, parseGetResource, runGet } from "./get-command.js";
import { MODULE_STATE_LIST, parseModuleState } from "./module-wait.js";
import { checkModuleName } from "./status-report.js";
import { WAIT_TIMEOUT_MS, runWait } from "./wait-command.js";
import { ExitCodes } from "./exit-codes.js";
import { processOutput, type Output } from "./output.js";
import { OutputFormats, formatOf, formatted, outputOption, type OutputFormat } from "./output-format.js";
import { CompletedNames, Shells, completionScript, parseShell, plainNames, type CompletedCommand, type CompletedName } from "./completion.js";
import { checkGrantArg, runRotate } from "./rotate-command.js";
import { checkKindArg, runRotateKind } from "./rotate-kind-command.js";
import { caFilesOf, runCaRotate } from "./ca-command.js";
import { existingMasterKey, readBackupKey, runBackup, runRestore } from "./backup-command.js";
import { upPaths } from "./paths.js";
import { stateDirsOf, type StateDirs } from "./backup-state-files.js";
import { permissionRefusal, permissionRefusalMessage } from "./nats-errors.js";
import { UP_NATS_TLS_LIFETIME } from "./nats-server-tls.js";
import { runStatus } from "./status-command.js";
import { checkRotationArg, runTrace } from "./trace-command.js";
import { parseMetricsListen, parseNatsMonitor, runUp } from "./up-command.js";
import { NATS_SERVER_CERT_LIFETIME, bootstrapFiles, controlPlaneYaml, natsConfigText } from "./bootstrap.js";
import { runVerify } from "./verify-command.js";
import { printable } from "./style.js";
import { DEFAULT_DEADLINE_MS, retrying, retryPolicy, type RetryPolicy } from "./retry.js";

const out = processOutput();
/** meshctl's version: the release's, or in the source tree its package's (dist/program.js is next to ../package.json). */
const version = meshVersion(import.meta.url) ?? "unknown";
const collect = (value: string, previous: string[]) => [...previous, value];

/** Runs a command with a lazily opened NATS connection, prints a CliError's message, exits with the code. */
async function run(fn: (connect: () => Promise<NatsConnection>, url: string) => Promise<number>): Promise<never> {
  const g = program.opts<{ server?: string; creds?: string; context?: string }>();
  let url = natsUrlFrom(g.server);
  let nc: NatsConnection | undefined;
  let code: number;
  try {
    const context = g.context ? readNatsContext(g.context) : undefined;
    url = natsUrlFrom(g.server, process.env, process.cwd(), context?.url);
    const identity = { ...(g.creds ? { creds: g.creds } : {}), ...(context ? { context } : {}) };
    const connect = async () => (nc ??= await connectForCli(url, { identity }));
    code = await fn(connect, url);
  } catch (e) {
    if (isCliError(e)) {
      // A message may carry a service's words (a refusal), so its control characters are shown, not obeyed.
      out.err(`meshctl: ${printable(e.message)}`);
      code = e.exitCode;
    } else if (isJetStreamTimeout(e)) {
      // What a cluster electing a leader looks like to a command that ran out of tries: said as such, with what to do.
      out.err(`meshctl: ${printable(jetStreamTimeoutMessage(`meshctl ${program.args[0] ?? ""}`.trim(), url))}`);
      code = ExitCodes.Failure;
    } else if (permissionRefusal(e)) {
      out.err(`meshctl: ${printable(permissionRefusalMessage(`meshctl ${program.args[0] ?? ""}`.trim(), permissionRefusal(e)!))}`);
      code = ExitCodes.Failure;
    } else {
      out.err(`meshctl: unexpected error: ${printable(errorMessage(e))}`);
      if (process.env.MESH_DEBUG && e instanceof Error && e.stack) out.err(e.stack);
      code = ExitCodes.Failure;
    }
  }
  // Bounded: the answer is given, and a close that waits on a server gone away (a member of a
  // cluster down, a reconnect under way) must not keep the command from exiting.
  const closed = (nc as NatsConnection | undefined)?.close().catch(() => undefined);
  if (closed) await Promise.race([closed, new Promise((r) => setTimeout(r, CLOSE_WAIT_MS).unref())]);
  process.exit(code);
}

/** How long meshctl waits for its connection to close before it exits anyway. */
const CLOSE_WAIT_MS = 3_000;

/** A duration option (`30s`, `2m`), or exit 2 saying which option is wrong. */
function durationOption(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  let ms: number;
  try {
    ms = parseTimerDuration(value, name);
  } catch (e) {
    throw new CliError(errorMessage(e), ExitCodes.Usage);
  }
  if (ms === 0) throw new CliError(`${name}: must be longer than 0`, ExitCodes.Usage);
  return ms;
}

/** The retry policy of a command from its `--timeout` (or `--request-timeout`) and `--verbose`. */
function policyOf(o: { timeout?: string; verbose?: boolean }, option = "--timeout"): RetryPolicy {
  const withinMs = durationOption(option, o.timeout);
  return retryPolicy({ ...(withinMs ? { withinMs } : {}), verbose: Boolean(o.verbose), option }, out);
}

/**
 * A command that reads the store and prints once it has read it all (`status`, `explain`,
 * `trace`): run again whole while what failed is retryable, within `--timeout`. `check`
 * refuses bad arguments first, before anything connects.
 */
function readCommand(what: string, o: { timeout?: string; verbose?: boolean }, fn: (store: Store) => Promise<number>, check?: () => void): Promise<never> {
  return run(async (connect, url) => {
    check?.();
    const policy = policyOf(o);
    const nc = await connect();
    const store = await openStoreForCli(nc, url, policy);
    const began = Date.now();
    // What a read meets of a cluster electing its leaders is said as such, and ridden out within the deadline.
    return retrying(what, policy, () => fn(store).catch((e: unknown) => Promise.reject(jetStreamUnavailableError(e, url, nc.info, Date.now() - began) ?? e)), {
      read: true,
    });
  });
}

/** A command that prints state, in the form `-o json|yaml` or `--json` asks for (output-format.ts). */
async function printing(
  o: { json?: boolean; output?: string },
  fn: (p: { out: Output; json: boolean; format: OutputFormat | undefined }) => Promise<number>,
): Promise<number> {
  const f = formatted(out, formatOf(o));
  try {
    return await fn(f);
  } finally {
    f.done();
  }
}

const TIMEOUT_HELP = `how long to keep trying while the service that must answer is not there yet or asks for a retry (default ${DEFAULT_DEADLINE_MS / 1000}s)`;
const VERBOSE_HELP = "show every attempt that is tried again, and why";

/** What `meshctl --help` says of the exit codes (exit-codes.ts has them). */
export const EXIT_CODES_HELP =
  "Exit codes: 0 done, 1 failed (the message says why and what to do), 2 wrong usage,\n3 the module named has never been processed (wait, apply --wait: still none at the timeout),\n4 (verify) the grant is not verified, 5 no such grant, rotation or provider,\n6 (rotate) a rotation of the grant is already running, 7 the service that must answer is not running,\n8 (rotate --wait) the rotation stalled, 9 a wait ran out of time (rotate --wait, wait, apply --wait, delete).";

/** The environment variables meshctl reads, and what for; each command's help lists those it reads. */
export const ENVIRONMENT: Record<string, string> = {
  NATS_URL: "the server (as --server)",
  NATS_CREDS: "the identity's .creds file (as --creds)",
  NATS_CONTEXT: "the nats CLI's context to take the server and identity of (as --context)",
  MESH_NATS_CREDENTIALS: "the identity, a .creds file or nats.user binding, when no --creds or context names one",
  MESH_NATS_USER: "with MESH_NATS_PASSWORD or MESH_NATS_PASSWORD_FILE: a user and password instead",
  MESH_NATS_CA_FILE: "a PEM bundle to verify a TLS server against (the mesh's .mesh/mesh-ca/ca.crt); with it, TLS is required",
  MESH_MASTER_KEY: "the master key, hex (else MESH_MASTER_KEY_FILE, else .mesh/master.key)",
  MESH_MASTER_KEY_FILE: "the master key's file (else .mesh/master.key); restore writes the backup's master key there",
  NATS_SERVER_BIN: "the nats-server to run (else the first on PATH, then /usr/sbin, /usr/local/sbin, /usr/local/bin, /usr/bin)",
  MESH_LOG_LEVEL: "passed on to the services: their log level (default info)",
  OTEL_EXPORTER_OTLP_ENDPOINT: "passed on to the services: where they send spans (docs/observability.md)",
  MESH_METRICS_LISTEN: "up and bootstrap: the default of --metrics-listen (never passed on as it is: each service gets a port of its own)",
  NO_COLOR: "no colours on a terminal",
  MESH_DEBUG: "print the stack of an unexpected error",
};
const CONNECTING = ["NATS_URL", "NATS_CREDS", "NATS_CONTEXT", "MESH_NATS_CREDENTIALS", "MESH_NATS_USER", "MESH_NATS_CA_FILE", "NO_COLOR", "MESH_DEBUG"];
const MASTER_KEY = ["MESH_MASTER_KEY"];

/** What each command reads of the environment, where that is not what a command that connects reads (CONNECTING). */
const ENVIRONMENT_OF: Record<string, string[]> = {
  up: [...CONNECTING, ...MASTER_KEY, "NATS_SERVER_BIN", "MESH_LOG_LEVEL", "OTEL_EXPORTER_OTLP_ENDPOINT", "MESH_METRICS_LISTEN"],
  bootstrap: [...CONNECTING, ...MASTER_KEY, "NATS_SERVER_BIN", "MESH_METRICS_LISTEN"],
  "control-plane": MASTER_KEY,
  "nats-config": MASTER_KEY,
  ca: [...CONNECTING, ...MASTER_KEY],
  backup: [...CONNECTING, ...MASTER_KEY, "MESH_MASTER_KEY_FILE"],
  restore: [...CONNECTING, "MESH_MASTER_KEY_FILE"],
  example: [],
  completion: [],
};

/** The environment variables command `name` reads. */
export function environmentOf(name: string): string[] {
  return ENVIRONMENT_OF[name] ?? CONNECTING;
}

/** The "Environment:" lines of a help text for `names`. */
function environmentHelp(names: string[]): string {
  const width = Math.max(...names.map((n) => n.length));
  return ["Environment:", ...names.map((n) => `  ${n.padEnd(width)}  ${ENVIRONMENT[n]}`)].join("\n");
}

/** meshctl: every command, its arguments and options. Parsing runs the command's action. */
export const program = new Command("meshctl")
  .version(version, "-V, --version", "print meshctl's version")
  .description("Operate the provisioning mesh: apply manifests, see what is satisfied and why, run it all locally.")
  .addOption(
    new Option(
      "-s, --server <url>",
      "NATS server URL(s), comma-separated; default: the one meshctl up recorded in .mesh/nats-url, else nats://127.0.0.1:4222",
    ).env("NATS_URL"),
  )
  .addOption(
    new Option("--creds <file>", "connect as the identity in this .creds file (or nats.user binding directory), before any other meshctl would take").env(
      "NATS_CREDS",
    ),
  )
  .addOption(
    new Option(
      "--context <name>",
      "take the server and identity of this context of the nats CLI (~/.config/nats/context/NAME.json); --server and --creds still come first",
    ).env("NATS_CONTEXT"),
  )
  .showHelpAfterError()
  // Wrong usage exits 2 (commander's own default is 1, which meshctl keeps for failures).
  .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : ExitCodes.Usage))
  .addHelpText("after", `\n${EXIT_CODES_HELP}\n\n${environmentHelp(Object.keys(ENVIRONMENT))}`);

program
  .command("apply")
  .description("validate manifest files here, then store all their documents (or none) through the resolver")
  .requiredOption(
    "-f, --filename <file>",
    "a YAML or JSON manifest file, or a directory (its .yaml and .yml files, sorted by name, not those of subdirectories); - for standard input; repeatable",
    collect,
    [],
  )
  .option("--wait", "then wait until every module applied is Ready or NothingRequired; fail at once on Unsatisfiable")
  .option("--json", "print the outcome as JSON")
  .addOption(outputOption())
  .option("--force", "apply what the control plane protects itself from: module mesh without a requirement it had")
  .option("--timeout <duration>", `${TIMEOUT_HELP}; with --wait, how long all of it may take (default ${WAIT_TIMEOUT_MS / 1000}s)`)
  .option("--verbose", VERBOSE_HELP)
  .action((o: { filename: string[]; wait?: boolean; json?: boolean; output?: string; force?: boolean; timeout?: string; verbose?: boolean }) =>
    run((connect, url) =>
      printing(o, (p) => {
        if (!o.wait) return runApply(connect, { files: o.filename, json: p.json, force: o.force, policy: policyOf(o) }, p.out);
        // With --wait, --timeout bounds all of it: sending (again while the resolver does not answer) and waiting.
        const timeoutMs = durationOption("--timeout", o.timeout) ?? WAIT_TIMEOUT_MS;
        const policy = retryPolicy({ withinMs: timeoutMs, verbose: Boolean(o.verbose) }, out);
        const store = async () => openStoreForCli(await connect(), url, policy);
        return runApply(connect, { files: o.filename, json: p.json, force: o.force, policy, wait: { untilMs: policy.deadline, timeoutMs, store } }, p.out);
      }),
    ),
  );

program
  .command("delete")
  .description("delete modules or providers (what no installed part needs any more is revoked and taken back), or drop what a removed grant retained")
  .argument("[what]", "module, provider or retained")
  .argument("[names...]", "the modules' or providers' names, or the grants (<module>/<requirement>) whose retained data to drop")
  .option("-f, --filename <file>", "delete the modules and providers a manifest file declares; repeatable", collect, [])
  .option("--force", "delete what the mesh protects: module mesh (its control plane), a provider that still serves grants (they are re-resolved)")
  .option("--wait-timeout <duration>", "how long to wait for the providers to revoke what was deleted (default 60s); exit 9 when they have not")
  .option("--json", 'print {"ok","deleted":[…],"grants":[{"grant","revoked","retained","gone","remains"}]} as JSON')
  .addOption(outputOption())
  .option("--timeout <duration>", TIMEOUT_HELP)
  .option("--verbose", VERBOSE_HELP)
  .action(
    (
      what: string | undefined,
      names: string[],
      o: { filename: string[]; force?: boolean; waitTimeout?: string; json?: boolean; output?: string; timeout?: string; verbose?: boolean },
    ) =>
      run(async (connect, url) => {
        const force = Boolean(o.force);
        if (o.filename.length && (what || names.length)) throw new CliError("give either -f FILE… or WHAT NAME…, not both", ExitCodes.Usage);
        const request = o.filename.length ? await deleteRequestOfFiles(o.filename, force) : deleteRequestOf(what, names, force);
        const waitMs = durationOption("--wait-timeout", o.waitTimeout);
        const policy = policyOf(o);
        const store = await openStoreForCli(await connect(), url, policy);
        return printing(o, (p) => runDelete(store, { request, json: p.json, policy, ...(waitMs ? { waitMs } : {}) }, p.out));
      }),
  );

program
  .command("status")
  .description("processed modules, their state, and each grant with provider, generation and conditions")
  .argument("[module]", "only this module")
  .option("--json", 'print {"modules":[…]} as JSON')
  .addOption(outputOption(["json", "yaml", "name"]))
  .option("--timeout <duration>", TIMEOUT_HELP)
  .option("--verbose", VERBOSE_HELP)
  .action((module: string | undefined, o: { json?: boolean; output?: string; timeout?: string; verbose?: boolean }) =>
    readCommand("status", o, (store) => printing(o, (p) => runStatus(store, { module, json: p.json, names: p.format === "name" }, p.out))),
  );

program
  .command("explain")
  .alias("describe")
  .description("for each requirement of a module, why it is or is not satisfied and what would satisfy it")
  .argument("<module>", "the module")
  .option("--json", "print the explanation as JSON")
  .addOption(outputOption())
  .option("--timeout <duration>", TIMEOUT_HELP)
  .option("--verbose", VERBOSE_HELP)
  .action((module: string, o: { json?: boolean; output?: string; timeout?: string; verbose?: boolean }) =>
    readCommand("explain", o, (store) => printing(o, (p) => runExplain(store, { module, json: p.json }, p.out))),
  );

program
  .command("get")
  .description("list modules, grants or providers as a table: state, why, how long; -w goes on printing each change")
  .argument("<what>", GetResources.join(", "))
  .argument("[name]", "modules: one module; grants: the grants of a module (shop) or one grant (shop/db); providers: one provider")
  .option("--json", 'print {"modules"|"grants"|"providers":[…]} as JSON')
  .addOption(outputOption(OutputFormats))
  .option("-w, --watch", "after the list, print each row again whenever it changes, until interrupted (Ctrl-C)")
  .option("--timeout <duration>", TIMEOUT_HELP)
  .option("--verbose", VERBOSE_HELP)
  .action((what: string, name: string | undefined, o: { json?: boolean; output?: string; watch?: boolean; timeout?: string; verbose?: boolean }) => {
    let resource: ReturnType<typeof parseGetResource> = "modules";
    const only = name !== undefined ? { name } : {};
    const listing = (format: OutputFormat | undefined) => (format === "wide" || format === "name" || format === "yaml" ? { output: format } : {});
    const stop = new AbortController();
    if (o.watch) for (const s of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.once(s, () => stop.abort());
    const watching = (store: Store) => {
      // Each change is a document of its own as it comes: nothing is collected to print at the end.
      const format = formatOf(o);
      return runGet(store, { resource, ...only, json: format === "json", ...listing(format), watch: stop.signal }, out);
    };
    return readCommand(
      "get",
      o,
      (store) => (o.watch ? watching(store) : printing(o, (p) => runGet(store, { resource, ...only, json: p.json, ...listing(p.format) }, p.out))),
      () => {
        resource = parseGetResource(what);
        checkGetName(resource, name);
      },
    );
  });

program
  .command("wait")
  .description("wait until a module is in a state, derived from its stored manifest; one not applied yet is waited for too")
  .argument("<module>", "the module")
  .requiredOption("--for <state>", `the state: one of ${MODULE_STATE_LIST.join(", ")}`)
  .option(
    "--timeout <duration>",
    `how long to wait (default ${WAIT_TIMEOUT_MS / 1000}s); then exit 9 naming the state seen last, or 3 when the module still has none`,
  )
  .option("--json", 'print {"module","for","outcome","state","message","since","processedRevision","manifestRevision","why","timedOut"} as JSON')
  .addOption(outputOption())
  .action((module: string, o: { for: string; timeout?: string; json?: boolean; output?: string }) =>
    run(async (connect, url) => {
      const state = parseModuleState(o.for);
      checkModuleName(module);
      const timeoutMs = durationOption("--timeout", o.timeout);
      // The store is opened within the wait's own time, riding out a cluster's election meanwhile.
      const store = await openStoreForCli(await connect(), url, retryPolicy({ withinMs: timeoutMs ?? WAIT_TIMEOUT_MS }, out));
      return printing(o, (p) => runWait(store, { module, for: state, json: p.json, ...(timeoutMs ? { timeoutMs } : {}) }, p.out));
    }),
  );

program
  .command("verify")
  .description("check a grant now, from the verifier and from its holders' nodes, and print the result")
  .argument("<grant>", "the grant: <module>/<requirement>")
  .option("--repair", "repair drift found now, even when the requirement says repair: report")
  .option("--json", "print the result as JSON")
  .addOption(outputOption())
  .option("--timeout <duration>", TIMEOUT_HELP)
  .option("--verbose", VERBOSE_HELP)
  .action((grant: string, o: { repair?: boolean; json?: boolean; output?: string; timeout?: string; verbose?: boolean }) =>
    run((connect) => printing(o, (p) => runVerify(connect, { grant, repair: o.repair, json: p.json, policy: policyOf(o) }, p.out))),
  );

program
  .command("rotate")
  .description("move every holder of a grant (or of every grant of a kind) to a new generation; the old one is retired only when all of them confirmed")
  .argument("[grant]", "the grant: <module>/<requirement>")
  .option("--kind <kind>", "rotate every grant of this kind instead of one (nats.user: reissues every identity with the permissions the mesh issues now)")
  .option("--wait", "show a live confirmed N/M holders line until the rotation is Committed or Stalled")
  .option("--timeout <duration>", "how long holders have to confirm before the rotation is Stalled (e.g. 90s, 10m; default the rotator's, 5m)")
  .option(
    "--request-timeout <duration>",
    `how long to keep sending the request while no rotator answers or it asks for a retry (default ${DEFAULT_DEADLINE_MS / 1000}s); a resent request starts no second rotation`,
  )
  .option("--verbose", VERBOSE_HELP)
  .option("--json", 'print {"rotation","grant","from","to","state","holders":[{"holder","confirmedAt"}],"missing":[…],"evicted":[…]} as JSON')
  .addOption(outputOption())
  .option(
    "--evict <holder>",
    "commit the grant's running (or Stalled) rotation without this holder (<node>/<part>, or <node>/<part>/<instance> for an SDK instance), which never came back; repeatable",
    collect,
    [],
  )
  .action(
    (
      grant: string | undefined,
      o: { kind?: string; wait?: boolean; timeout?: string; requestTimeout?: string; verbose?: boolean; json?: boolean; output?: string; evict: string[] },
    ) =>
      run(async (connect, url) => {
        if ((grant === undefined) === (o.kind === undefined))
          throw new CliError("give either a grant (<module>/<requirement>) or --kind KIND, not both or neither", ExitCodes.Usage);
        if (o.kind !== undefined && o.evict.length) throw new CliError("--evict names holders of one grant: give the grant, not --kind", ExitCodes.Usage);
        if (o.kind !== undefined) checkKindArg(o.kind);
        else checkGrantArg(grant!);
        const timeoutMs = durationOption("--timeout", o.timeout);
        const policy = policyOf({ timeout: o.requestTimeout, verbose: o.verbose }, "--request-timeout");
        const store = await openStoreForCli(await connect(), url, policy);
        return printing(o, (p) => {
          const common = { wait: o.wait, json: p.json, policy, ...(timeoutMs ? { timeoutMs } : {}) };
          if (o.kind !== undefined) return runRotateKind(store, { ...common, kind: o.kind }, p.out);
          return runRotate(store, { grant: grant!, ...common, ...(o.evict.length ? { evict: o.evict } : {}) }, p.out);
        });
      }),
  );

program
  .command("revoke")
  .description("for a leak: push a new generation to every holder and disable the current one after the grace, whether or not all of them confirmed")
  .argument("<grant>", "the grant: <module>/<requirement>")
  .option("--reason <text>", "why, recorded on the grant with who revoked and when")
  .option("--grace <duration>", "how long holders have to take the new generation before the current one stops working (default 1s; 0s allowed)")
  .option("--request-timeout <duration>", `how long to keep sending the request while no rotator answers (default ${DEFAULT_DEADLINE_MS / 1000}s)`)
  .option("--verbose", VERBOSE_HELP)
  .option("--json", 'print the rotation as rotate --json does, with "lockedOut":[…]')
  .addOption(outputOption())
  .action((grant: string, o: { reason?: string; grace?: string; requestTimeout?: string; verbose?: boolean; json?: boolean; output?: string }) =>
    run(async (connect, url) => {
      checkGrantArg(grant);
      const graceMs = o.grace === "0s" || o.grace === "0" ? 0 : (durationOption("--grace", o.grace) ?? 1_000);
      const policy = policyOf({ timeout: o.requestTimeout, verbose: o.verbose }, "--request-timeout");
      const by = `${userInfo().username}@${hostname()}`;
      const store = await openStoreForCli(await connect(), url, policy);
      return printing(o, (p) =>
        runRotate(store, { grant, json: p.json, policy, graceMs: 5_000, revoke: { graceMs, by, ...(o.reason ? { reason: o.reason } : {}) } }, p.out),
      );
    }),
  );

const ca = program.command("ca").description("the mesh's certificate authority (provider mesh-ca, kind tls.certificate)");
ca.command("rotate")
  .description(
    "rotate the authority's root with no failed handshake: the new root joins every holder's bundle, then issues every certificate again, then alone is trusted; run again to resume",
  )
  .option("--provider <name>", "the provider whose authority is rotated", MESH_CA_PROVIDER)
  .option("--timeout <duration>", "how long the whole rotation may take before the command stops (default 30m; run it again to resume)")
  .option("--rotation-timeout <duration>", "how long each grant's holders have to confirm, as meshctl rotate --timeout (default the rotator's, 5m)")
  .option("--json", 'print {"provider","from","to","steps":[{"step","what","rotations":[{"grant","exitCode","said"}]}]} as JSON')
  .addOption(outputOption())
  .action((o: { provider: string; timeout?: string; rotationTimeout?: string; json?: boolean; output?: string }) =>
    run(async (connect, url) => {
      const timeoutMs = durationOption("--timeout", o.timeout) ?? 30 * 60_000;
      const rotationTimeoutMs = durationOption("--rotation-timeout", o.rotationTimeout);
      const { key } = loadMasterKey(process.env, resolve(".mesh/master.key"));
      const store = await openStoreForCli(await connect(), url, policyOf({}, "--timeout"));
      const files = await caFilesOf(store, o.provider);
      return printing(o, (p) =>
        runCaRotate(
          store,
          files,
          { masterKey: key, provider: o.provider, timeoutMs, ...(rotationTimeoutMs ? { rotationTimeoutMs } : {}), ...serverOf(url), json: p.json },
          p.out,
        ),
      );
    }),
  );

interface StateDirOptions {
  operatorDir: string;
  resolverDir?: string;
  caDir: string;
}
const OPERATOR_DIR_HELP = "the operator's directory: its keys (sealed), JWTs, the admin's .creds (/etc/mesh/nats-operator where deploy/README.md set it up)";
const RESOLVER_DIR_HELP =
  "the account resolver's directory, where the server keeps the account as last pushed, with its revocations (default: resolver/ in --operator-dir)";
const CA_DIR_HELP = "the mesh's certificate authority's directory (its bundle and sealed key)";

/** The directories backup and restore read and write the operator's and authority's files in. */
function stateDirsOption(o: StateDirOptions): StateDirs {
  return stateDirsOf(upPaths().state, {
    operator: resolve(o.operatorDir),
    ca: resolve(o.caDir),
    ...(o.resolverDir ? { resolver: resolve(o.resolverDir) } : {}),
  });
}

program
  .command("backup")
  .description(
    "write every stream of the mesh (through JetStream's snapshots), its master key and its operator's and certificate authority's keys to FILE, encrypted under the key in --key-file; the mesh keeps running",
  )
  .argument("<file>", "the backup file to write (mode 0600)")
  .requiredOption(
    "--key-file <file>",
    "the key the backup is encrypted under: 64 hex characters (make one with: openssl rand -hex 32); keep it apart from the file",
  )
  .option("--operator-dir <dir>", OPERATOR_DIR_HELP, ".mesh/nats-operator")
  .option("--resolver-dir <dir>", RESOLVER_DIR_HELP)
  .option("--ca-dir <dir>", CA_DIR_HELP, ".mesh/mesh-ca")
  .option("--json", 'print {"file","bytes","keyId","createdAt","meshVersion","recordVersion","streams":[{"name","messages","bytes"}],"files":[…]} as JSON')
  .addOption(outputOption())
  .action((file: string, o: StateDirOptions & { keyFile: string; json?: boolean; output?: string }) =>
    run(async (connect) => {
      const key = readBackupKey(o.keyFile);
      const masterKey = existingMasterKey(process.env, upPaths().masterKey);
      const nc = await connect();
      return printing(o, (p) => runBackup(nc, { file: resolve(file), key, masterKey, dirs: stateDirsOption(o), meshVersion: version, json: p.json }, p.out));
    }),
  );

program
  .command("restore")
  .description(
    "put a backup's streams back onto a server without the mesh, its master key in MESH_MASTER_KEY_FILE (else .mesh/master.key) and its operator's and certificate authority's keys under .mesh/; then start the services there (meshctl up --restore does all of it for the server it starts)",
  )
  .argument("<file>", "the backup file meshctl backup wrote")
  .requiredOption("--key-file <file>", "the key the backup was encrypted under")
  .option("--operator-dir <dir>", OPERATOR_DIR_HELP, ".mesh/nats-operator")
  .option("--resolver-dir <dir>", RESOLVER_DIR_HELP)
  .option("--ca-dir <dir>", CA_DIR_HELP, ".mesh/mesh-ca")
  .option(
    "--keys-only",
    "write the master key and the operator's and authority's keys only, without a server: to configure a server of your own with (meshctl nats-config) before its streams are restored",
  )
  .option("--json", 'print {"file","createdAt","streams":[…],"files":[…],"masterKeyFile","masterKeyId"} as JSON')
  .addOption(outputOption())
  .action((file: string, o: StateDirOptions & { keyFile: string; keysOnly?: boolean; json?: boolean; output?: string }) =>
    run(async (connect) => {
      const key = readBackupKey(o.keyFile);
      const masterKeyFile = upPaths({ masterKeyFile: process.env.MESH_MASTER_KEY_FILE || undefined }).masterKey;
      const nc = o.keysOnly ? undefined : await connect();
      return printing(o, (p) => runRestore(nc, { file: resolve(file), key, masterKeyFile, dirs: stateDirsOption(o), json: p.json }, p.out));
    }),
  );

program
  .command("reissue-agent")
  .description(
    "for a node that lost its disk: issue its agent's identity again, revoke the current one at once, and write the new one to a directory to start the agent with",
  )
  .argument("<node>", "the node whose agent lost its identity")
  .requiredOption("--out <dir>", "where to write the new identity (creds, inboxPrefix …, readable by you only): a new or empty directory")
  .option("--reason <text>", "why, recorded on the grant with who revoked and when (default: names the node)")
  .option("--request-timeout <duration>", `how long to keep sending the request while no rotator answers (default ${DEFAULT_DEADLINE_MS / 1000}s)`)
  .option("--verbose", VERBOSE_HELP)
  .option("--json", 'print {"node","grant","rotation","revoked","generation","out"} as JSON')
  .addOption(outputOption())
  .action((node: string, o: { out: string; reason?: string; requestTimeout?: string; verbose?: boolean; json?: boolean; output?: string }) =>
    run(async (connect, url) => {
      const policy = policyOf({ timeout: o.requestTimeout, verbose: o.verbose }, "--request-timeout");
      const by = `${userInfo().username}@${hostname()}`;
      const store = await openStoreForCli(await connect(), url, policy);
      return printing(o, (p) => runReissueAgent(store, { node, out: o.out, by, json: p.json, policy, ...(o.reason ? { reason: o.reason } : {}) }, p.out));
    }),
  );

program
  .command("audit")
  .description(
    "who asked what of the mesh, when, and what came of it: the audit trail, one line per request (apply, delete, rotate, revoke, evict, verify, repair, fetch, a part's declaration)",
  )
  .option("--since <when>", "from this long ago (1h, 7d) or this time (2026-12-01T00:00:00Z); default: all the trail keeps")
  .option("--grant <grant>", "only requests of this grant (<module>/<requirement>)")
  .option(
    "--who <who>",
    "only requests by this identity: an operator's name, or as the trail names it (operator:alice, admin (break-glass), part:shop/api@node-a)",
  )
  .option("--limit <n>", "the latest n requests at most (default 1000)")
  .option("--json", 'print {"requests":[{"id","at","who","action","grant","target","outcome","message","service","node"}]} as JSON')
  .addOption(outputOption())
  .action((o: { since?: string; grant?: string; who?: string; limit?: string; json?: boolean; output?: string }) =>
    run(async (connect) => {
      const limit = o.limit === undefined ? undefined : Number(o.limit);
      if (limit !== undefined && (!Number.isInteger(limit) || limit < 1))
        throw new CliError(`--limit ${o.limit} is not a whole number of 1 or more`, ExitCodes.Usage);
      sinceTime(o.since);
      const nc = await connect();
      return printing(o, (p) =>
        runAudit(
          nc,
          {
            json: p.json,
            ...(o.since ? { since: o.since } : {}),
            ...(o.grant ? { grant: o.grant } : {}),
            ...(o.who ? { who: o.who } : {}),
            ...(limit ? { limit } : {}),
          },
          p.out,
        ),
      );
    }),
  );

const admin = program
  .command("admin")
  .description(
    "operators with names: each gets an identity of its own, whose requests the audit trail records by name; the bootstrap admin stays, as the break-glass identity",
  );

admin
  .command("add")
  .description("issue operator NAME's identity and write it to a directory (run as the bootstrap admin, where meshctl up or bootstrap runs the mesh)")
  .argument("<name>", "the operator's name: lower-case letters, digits and -")
  .requiredOption("--out <dir>", "where to write the identity (creds, inboxPrefix …, readable by you only): a new or empty directory")
  .option("--json", 'print {"name","out","user","expiresAt"} as JSON')
  .addOption(outputOption())
  .action((name: string, o: { out: string; json?: boolean; output?: string }) =>
    run(async (connect, url) => {
      const store = await openStoreForCli(await connect(), url, policyOf({}, "--request-timeout"));
      return printing(o, (p) => runAdminAdd(store, { name, out: o.out, json: p.json }, p.out));
    }),
  );

admin
  .command("remove")
  .description("revoke operator NAME's identity: the server closes its connections at once and refuses it from then on")
  .argument("<name>", "the operator's name")
  .option("--json", 'print {"name","revoked":[…]} as JSON')
  .addOption(outputOption())
  .action((name: string, o: { json?: boolean; output?: string }) =>
    run(async (connect, url) => {
      const store = await openStoreForCli(await connect(), url, policyOf({}, "--request-timeout"));
      return printing(o, (p) => runAdminRemove(store, { name, json: p.json }, p.out));
    }),
  );

admin
  .command("list")
  .description("the named operators, their identities' keys and when each expires")
  .option("--json", 'print {"operators":[{"name","user","generation","expiresAt"}],"breakGlass"} as JSON')
  .addOption(outputOption())
  .action((o: { json?: boolean; output?: string }) =>
    run(async (connect, url) => {
      const store = await openStoreForCli(await connect(), url, policyOf({}, "--request-timeout"));
      return printing(o, (p) => runAdminList(store, { json: p.json }, p.out));
    }),
  );

program
  .command("trace")
  .description("a rotation's fan-out as a timeline: when it was staged, broadcast and committed, and when each holder confirmed")
  .argument("<rotation>", "the rotation: <module>/<requirement>#<generation> (or <module>/<requirement> for its latest)")
  .option("--json", "print the timeline as JSON")
  .addOption(outputOption())
  .option("--timeout <duration>", TIMEOUT_HELP)
  .option("--verbose", VERBOSE_HELP)
  .action((rotation: string, o: { json?: boolean; output?: string; timeout?: string; verbose?: boolean }) =>
    readCommand(
      "trace",
      o,
      (store) => printing(o, (p) => runTrace(store, { rotation, json: p.json }, p.out)),
      () => checkRotationArg(rotation),
    ),
  );

program
  .command("console")
  .description(
    "a read-only web console of the mesh, live: the graph of modules, requirements, grants and providers, each grant's page, each rotation's fan-out",
  )
  .option(
    "--listen <host:port>",
    "where to listen; an address beyond loopback only with --tls-cert and --tls-key (port 0 picks a free one)",
    DEFAULT_CONSOLE_LISTEN,
  )
  .option("--tls-cert <file>", "PEM certificate, to serve HTTPS (beyond loopback: this, or the mesh's authority in the directory of meshctl up issues one)")
  .option("--tls-key <file>", "PEM private key of --tls-cert")
  .option("--host <name>", "a host name clients reach a console beyond loopback by (the Host header it accepts); repeatable", collect, [])
  .action((o: { listen: string; tlsCert?: string; tlsKey?: string; host: string[] }) =>
    run(async (connect, url) => {
      // In the directory of meshctl up, the mesh's authority issues the console's certificate when none is given.
      const ca = caFiles(resolve(".mesh", StateFiles.caDir));
      const authority =
        !o.tlsCert && existsSync(ca.certFile) && existsSync(ca.keyFile)
          ? { files: ca, masterKey: loadMasterKey(process.env, resolve(".mesh/master.key")).key }
          : undefined;
      const opts: ConsoleOptions = {
        listen: o.listen,
        hostNames: o.host,
        ...(o.tlsCert ? { tlsCert: o.tlsCert } : {}),
        ...(o.tlsKey ? { tlsKey: o.tlsKey } : {}),
        ...(authority ? { authority } : {}),
      };
      checkConsoleOptions(opts);
      const stop = new AbortController();
      for (const s of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.once(s, () => stop.abort());
      // console has no --timeout: the default deadline, and no option named in what it says while it waits.
      return runConsole(await openStoreForCli(await connect(), url, retryPolicy({ option: null }, out)), opts, out, stop.signal);
    }),
  );

program
  .command("example")
  .description(
    `write example manifests into the working directory, at their paths under examples/ (${examplesHelp()}), and say what to run next; ` +
      "a file that exists with other contents is left as it is, and nothing written, unless --force",
  )
  .argument("[name]", `the example: ${Object.keys(EXAMPLES).join(", ")}; without it, each one and what it writes`)
  .option("--force", "overwrite files that exist with other contents")
  .action((name: string | undefined, o: { force?: boolean }) => run(async () => runExample({ ...(name !== undefined ? { name } : {}), force: o.force }, out)));

/** The options `up` and `bootstrap` share. */
interface LocalMeshOptions {
  filename: string[];
  nodes?: string;
  bindings: string;
  allowHook: string[];
  hookUser?: string;
  natsMonitor?: string;
  natsTlsLifetime?: string;
  metricsListen?: string;
  auditRetention?: string;
  restore?: string;
  keyFile?: string;
}

const RESTORE_HELP =
  "bring the mesh back from a backup meshctl backup wrote: its keys go into .mesh/ and its streams onto the server (which must hold none of them) before any service starts; with --key-file";
const RESTORE_KEY_HELP = "the key the --restore backup was encrypted under";

/** `--restore FILE --key-file KEY` of up and bootstrap, both or neither (exit 2 otherwise); the key read. */
function restoreOption(o: Pick<LocalMeshOptions, "restore" | "keyFile">): { file: string; key: MasterKey } | undefined {
  if (o.restore === undefined && o.keyFile === undefined) return undefined;
  if (o.restore === undefined || o.keyFile === undefined)
    throw new CliError(
      `${o.restore === undefined ? "--key-file" : "--restore"} needs ${o.restore === undefined ? "--restore FILE" : "--key-file KEY"}: the backup and the key it is encrypted under go together`,
      ExitCodes.Usage,
    );
  return { file: resolve(o.restore), key: readBackupKey(o.keyFile) };
}

/** `--allow-hook` of up and bootstrap, checked before anything starts (exit 2 when wrong). */
function hooksOption(specs: readonly string[]): AllowedHooks | undefined {
  if (specs.length === 0) return undefined;
  try {
    return parseAllowedHooks(specs);
  } catch (e) {
    throw new CliError(errorMessage(e), ExitCodes.Usage);
  }
}

const ALLOW_HOOK_HELP =
  "a hook every agent allows, for parts' onRotate: NAME=COMMAND, COMMAND run without a shell (split on whitespace) as --hook-user; repeatable";
const HOOK_USER_HELP = "the unprivileged user the agents run hooks as (default nobody; the agents' own user when meshctl is not root)";
const NATS_MONITOR_HELP =
  "open the monitoring port of the NATS server this command starts, at 127.0.0.1:PORT (port 0 picks a free one); default: none. " +
  "It answers anyone who can reach it, without authentication, with every identity's connections and subscriptions (/connz)";

const NATS_TLS_LIFETIME_HELP = `how long each certificate of the NATS server this command starts is valid (from 5m to 30d; default ${UP_NATS_TLS_LIFETIME}); the rotator renews it at two thirds, checking once a minute`;

/** The first server of a NATS URL list, as `meshctl ca rotate` looks at what it presents; none for one it cannot parse. */
function serverOf(url: string): { server?: { host: string; port: number } } {
  const server = firstNatsServer(url);
  return server ? { server } : {};
}

/** `--nats-tls-lifetime` in milliseconds; a CliError for a duration that is not one, or out of bounds. */
function natsTlsLifetimeOption(value: string | undefined): number | undefined {
  const ms = durationOption("--nats-tls-lifetime", value);
  // The rotator looks for certificates due every minute: a third of the lifetime must leave it room.
  if (ms !== undefined && (ms < 5 * 60_000 || ms > 30 * 86_400_000))
    throw new CliError(`--nats-tls-lifetime ${value}: give from 5m to 30d (the rotator renews at two thirds, and looks once a minute)`, ExitCodes.Usage);
  return ms;
}

const AUDIT_RETENTION_HELP =
  "how long the audit trail keeps each record (from 1m to 3650d; default 90d for a new trail, an existing one keeps its own); the trail also drops its oldest records past 2 GiB";

/** `--audit-retention` in milliseconds; a CliError for a duration that is not one, or out of bounds. */
function auditRetentionOption(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  let ms: number;
  try {
    ms = parseDuration(value);
  } catch (e) {
    throw new CliError(`--audit-retention: ${errorMessage(e)}`, ExitCodes.Usage);
  }
  if (ms < 60_000 || ms > 3_650 * 86_400_000) throw new CliError(`--audit-retention ${value}: give from 1m to 3650d`, ExitCodes.Usage);
  return ms;
}

const METRICS_LISTEN_HELP =
  "serve each service's metrics (/metrics, Prometheus) and health (/healthz, /readyz) over HTTP: the first service at HOST:PORT, " +
  "the others on the ports after it, in the order up lists them (port 0: any free one each); default: MESH_METRICS_LISTEN, else none. No authentication: keep it on loopback or a network only your scraper reaches";

/** `up` and `bootstrap`: run until a signal; a first signal stops everything in order, a second kills at once. */
function runLocalMesh(o: LocalMeshOptions, bootstrap?: { servicesNode?: string }): Promise<never> {
  return run(async (_connect, url) => {
    const hooks = hooksOption(o.allowHook);
    const natsMonitor = o.natsMonitor === undefined ? undefined : parseNatsMonitor(o.natsMonitor);
    const metricsSpec = o.metricsListen ?? (process.env.MESH_METRICS_LISTEN || undefined);
    const metricsListen = metricsSpec === undefined ? undefined : parseMetricsListen(metricsSpec);
    const auditRetentionMs = auditRetentionOption(o.auditRetention);
    const natsTlsLifetimeMs = natsTlsLifetimeOption(o.natsTlsLifetime);
    const restore = restoreOption(o);
    const stop = new AbortController();
    let signals = 0;
    const onSignal = () => {
      // runUp's exit hook SIGKILLs what it started when meshctl exits at once.
      if (++signals === 1) stop.abort();
      else {
        out.err("killing everything at once");
        process.exit(130);
      }
    };
    for (const s of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(s, onSignal);
    const nodes = o.nodes
      ?.split(",")
      .map((n) => n.trim())
      .filter(Boolean);
    const natsUrlNamed = isNamedServer(program.opts<{ server?: string }>().server);
    return runUp(
      {
        files: o.filename,
        natsUrl: url,
        natsUrlNamed,
        bindings: o.bindings,
        ...(nodes ? { nodes } : {}),
        ...(bootstrap ? { bootstrap } : {}),
        ...(hooks ? { hooks } : {}),
        ...(o.hookUser ? { hookUser: o.hookUser } : {}),
        ...(natsMonitor ? { natsMonitor } : {}),
        ...(metricsListen ? { metricsListen } : {}),
        ...(auditRetentionMs ? { auditRetentionMs } : {}),
        ...(natsTlsLifetimeMs ? { natsTlsLifetimeMs } : {}),
        ...(restore ? { restore } : {}),
      },
      out,
      stop.signal,
    );
  });
}

program
  .command("up")
  .description("run the whole mesh on this machine (NATS, resolver, provisioner, agents), apply files, show a live status until Ctrl-C")
  .option("-f, --filename <file>", "a manifest file to apply once the mesh runs; repeatable", collect, [])
  .option("--nodes <list>", "comma-separated nodes to run an agent for (default: the nodes of the applied parts, else node-a)")
  .option("--bindings <dir>", "bindings root; the agent of node N writes under <dir>/N/", ".mesh/bindings")
  .option("--allow-hook <NAME=COMMAND>", ALLOW_HOOK_HELP, collect, [])
  .option("--hook-user <user>", HOOK_USER_HELP)
  .option("--nats-monitor <host:port>", NATS_MONITOR_HELP)
  .option("--nats-tls-lifetime <duration>", NATS_TLS_LIFETIME_HELP)
  .option("--metrics-listen <host:port>", METRICS_LISTEN_HELP)
  .option("--audit-retention <duration>", AUDIT_RETENTION_HELP)
  .option("--restore <file>", RESTORE_HELP)
  .option("--key-file <file>", RESTORE_KEY_HELP)
  .action((o: LocalMeshOptions) => runLocalMesh(o));

program
  .command("bootstrap")
  .description(
    "like up, on a NATS with authentication (started here when none answers at a loopback URL): declare the control plane as module mesh, " +
      "wait until the mesh has satisfied it, and restart every service with the broker identity the mesh granted it",
  )
  .option("-f, --filename <file>", "a manifest file to apply once the control plane runs on its own identities; repeatable", collect, [])
  .option("--nodes <list>", "comma-separated nodes to run an agent for (default: the nodes of the applied parts, else node-a)")
  .option("--services-node <node>", "the node the services run on (default: the first node)")
  .option("--bindings <dir>", "bindings root; the agent of node N writes under <dir>/N/", ".mesh/bindings")
  .option("--allow-hook <NAME=COMMAND>", ALLOW_HOOK_HELP, collect, [])
  .option("--hook-user <user>", HOOK_USER_HELP)
  .option("--nats-monitor <host:port>", NATS_MONITOR_HELP)
  .option("--nats-tls-lifetime <duration>", NATS_TLS_LIFETIME_HELP)
  .option("--metrics-listen <host:port>", METRICS_LISTEN_HELP)
  .option("--audit-retention <duration>", AUDIT_RETENTION_HELP)
  .option("--restore <file>", RESTORE_HELP)
  .option("--key-file <file>", RESTORE_KEY_HELP)
  .action((o: LocalMeshOptions & { servicesNode?: string }) => runLocalMesh(o, o.servicesNode ? { servicesNode: o.servicesNode } : {}));

program
  .command("control-plane")
  .description(
    "print the control plane's documents (the bootstrap provider and module mesh) as YAML, for a mesh set up by hand; apply them with meshctl apply -f -",
  )
  .requiredOption("--nodes <list>", "comma-separated nodes to run an agent on")
  .option("--services-node <node>", "the node the services run on (default: the first node)")
  .requiredOption("--admin-creds <path>", "the operator admin's .creds file, as the provisioner reads it (meshctl nats-config writes it)")
  .requiredOption("--signing-keys-file <path>", "the sealed signing keys, as the provisioner and the rotator read them (meshctl nats-config writes it)")
  .option(
    "--nats-ca-file <path>",
    "for servers that require TLS: the bundle their certificates are verified against (the mesh's .mesh/mesh-ca/ca.crt for nats-config --tls-name), as the services read it; the provider names them tls:// and every identity's binding carries the bundle",
  )
  .action((o: { nodes: string; servicesNode?: string; adminCreds: string; signingKeysFile: string; natsCaFile?: string }) =>
    run(async (_connect, url) => {
      const nodes = o.nodes
        .split(",")
        .map((n) => n.trim())
        .filter(Boolean);
      out.out(
        controlPlaneYaml({
          url,
          nodes,
          ...(o.servicesNode ? { servicesNode: o.servicesNode } : {}),
          adminCredsFile: o.adminCreds,
          signingKeysFile: o.signingKeysFile,
          ...(o.natsCaFile ? { caFile: o.natsCaFile } : {}),
        }).trimEnd(),
      );
      return ExitCodes.Ok;
    }),
  );

program
  .command("nats-config")
  .description(
    "print the configuration of a nats-server (or of each cluster member) whose operator is the mesh: operator, system account, full resolver. " +
      "The operator's keys are made under --dir when it has none (and kept when it has), sealed under the master key",
  )
  .requiredOption("--listen <host:port>", "where the server listens for clients, e.g. 0.0.0.0:4222")
  .option("--dir <dir>", "the operator's directory: keys, JWTs, the admin's .creds", ".mesh/nats-operator")
  .option("--store-dir <path>", "JetStream's store directory on the server's host (default: under --dir)")
  .option("--resolver-dir <path>", "the account resolver's directory on the server's host (default: under --dir)")
  .option(
    "--cluster-file <file>",
    "a file with this member's cluster { … } block, added as it is; with --tls-name (or --tls-ca), its routes get TLS too, each member verifying the others' certificates",
  )
  .option("--server-name <name>", "this member's server_name: unique in the cluster, and the same across its restarts (JetStream knows its replicas by it)")
  .option(
    "--tls-name <name>",
    "serve clients TLS with a certificate the mesh's authority (.mesh/mesh-ca) issues for this DNS name or IP address, under --dir; repeatable",
    collect,
    [],
  )
  .option("--tls-lifetime <duration>", `how long that certificate is valid (default ${NATS_SERVER_CERT_LIFETIME})`)
  .option("--tls-cert <file>", "serve clients TLS with your own certificate instead (with --tls-key; absolute paths on the server's host)")
  .option("--tls-key <file>", "the key of --tls-cert")
  .option("--tls-ca <file>", "with --tls-cert: the authority clients' certificates are verified against")
  .action(
    (o: {
      listen: string;
      dir: string;
      storeDir?: string;
      resolverDir?: string;
      clusterFile?: string;
      serverName?: string;
      tlsName: string[];
      tlsLifetime?: string;
      tlsCert?: string;
      tlsKey?: string;
      tlsCa?: string;
    }) =>
      run(async () => {
        const files = o.dir === ".mesh/nats-operator" ? bootstrapFiles(resolve(".mesh")) : operatorFiles(resolve(o.dir));
        if (o.tlsName.length && (o.tlsCert || o.tlsKey))
          throw new CliError("give --tls-name (the mesh's authority issues) or --tls-cert and --tls-key (yours), not both", ExitCodes.Usage);
        if (Boolean(o.tlsCert) !== Boolean(o.tlsKey)) throw new CliError("give both --tls-cert and --tls-key, or neither", ExitCodes.Usage);
        if (o.tlsCa && !o.tlsCert) throw new CliError("--tls-ca goes with --tls-cert and --tls-key", ExitCodes.Usage);
        const lifetimeMs = durationOption("--tls-lifetime", o.tlsLifetime) ?? parseDuration(NATS_SERVER_CERT_LIFETIME);
        const tls = o.tlsName.length
          ? { names: o.tlsName, lifetimeMs, ca: caFiles(resolve(".mesh", StateFiles.caDir)) }
          : o.tlsCert && o.tlsKey
            ? { certFile: o.tlsCert, keyFile: o.tlsKey, ...(o.tlsCa ? { caFile: o.tlsCa } : {}) }
            : undefined;
        const { key } = loadMasterKey(process.env, resolve(".mesh/master.key"));
        out.out(
          (
            await natsConfigText({
              files,
              masterKey: key,
              listen: o.listen,
              ...(o.storeDir ? { storeDir: o.storeDir } : {}),
              ...(o.resolverDir ? { resolverDir: o.resolverDir } : {}),
              ...(o.clusterFile ? { clusterFile: o.clusterFile } : {}),
              ...(o.serverName ? { serverName: o.serverName } : {}),
              ...(tls ? { tls, onTls: (line: string) => out.err(line) } : {}),
            })
          ).trimEnd(),
        );
        out.err(`operator keys in ${files.dir}; the admin's credentials: ${files.adminCredsFile}; provider option signingKeysFile: ${files.signingKeysFile}`);
        return ExitCodes.Ok;
      }),
  );

/** What each command's first argument names in the mesh, for completion. */
const NAMES_OF: Record<string, CompletedName> = {
  status: "modules",
  explain: "modules",
  wait: "modules",
  verify: "grants",
  rotate: "grants",
  revoke: "grants",
  trace: "grants",
};

/** The first words some commands take, for completion. */
const FIRST_WORDS: Record<string, readonly string[]> = {
  get: GetResources,
  delete: ["module", "provider", "retained"],
  example: Object.keys(EXAMPLES),
  completion: Shells,
};

/** meshctl's commands as its help lists them: not the hidden ones, nor help itself. */
export function visibleCommands(): Command[] {
  return program
    .createHelp()
    .visibleCommands(program)
    .filter((c) => c.name() !== "help");
}

/** meshctl's commands as completion sees them, from their definitions above. */
function completedCommands(): CompletedCommand[] {
  return visibleCommands().map((c) => {
    const choices: Record<string, string[]> = {};
    const fileOptions: string[] = [];
    const valueOptions: string[] = [];
    for (const o of c.options) {
      const spellings = [o.long, o.short].filter((x): x is string => Boolean(x));
      if (o.argChoices) for (const f of spellings) choices[f] = o.argChoices;
      if (o.long === "--filename") fileOptions.push(...spellings);
      if (o.required || o.optional) valueOptions.push(...spellings);
    }
    const first = FIRST_WORDS[c.name()];
    const names = NAMES_OF[c.name()];
    return {
      name: c.name(),
      aliases: c.aliases(),
      options: [...c.options.flatMap((o) => [o.long, o.short].filter((x): x is string => Boolean(x))), "--help"],
      valueOptions,
      fileOptions,
      choices,
      ...(first ? { firstWords: [...first] } : {}),
      ...(names ? { names } : {}),
    };
  });
}

program
  .command("completion")
  .description(
    "print the completion script of a shell: source <(meshctl completion bash) in ~/.bashrc (zsh alike; fish: > ~/.config/fish/completions/meshctl.fish)",
  )
  .argument("<shell>", Shells.join(", "))
  .action((shell: string) =>
    run(async () => {
      out.raw(completionScript(parseShell(shell), completedCommands()));
      return ExitCodes.Ok;
    }),
  );

/** How long a Tab may wait for the mesh's names before completion offers none. */
const COMPLETE_WITHIN_MS = 1_500;

/** The names completion offers: modules, grants (`shop/db`) or providers, one a line; none when the mesh does not answer in time. */
program
  .command("__complete", { hidden: true })
  .argument("<what>")
  .action((what: string) =>
    run(async (connect, url) => {
      if (!(CompletedNames as readonly string[]).includes(what)) return ExitCodes.Ok;
      const listed = (async () => {
        const store = await openStoreForCli(await connect(), url, retryPolicy({ withinMs: COMPLETE_WITHIN_MS, option: null }, { err: () => undefined }));
        const kv = { modules: store.kv.manifests, grants: store.kv.grants, providers: store.kv.providers }[what as CompletedName];
        const names: string[] = [];
        for await (const k of await kv.keys()) names.push(what === "grants" ? k.replace(".", "/") : k);
        return names.sort();
      })();
      listed.catch(() => undefined); // past the race, a failure is not the user's business
      const names = await Promise.race([listed, new Promise<string[]>((r) => setTimeout(() => r([]), COMPLETE_WITHIN_MS).unref())]).catch(() => []);
      for (const n of plainNames(names)) out.out(n);
      return ExitCodes.Ok;
    }),
  );

// Each command's help says which of the environment it reads (all of them but the hidden one).
for (const c of visibleCommands()) {
  const names = environmentOf(c.name());
  if (names.length) c.addHelpText("after", `\n${environmentHelp(names)}`);
}
