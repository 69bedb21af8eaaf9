import { Writable } from "node:stream";
import { ROOT_CONTEXT, TraceFlags, trace } from "@opentelemetry/api";
import { describe, expect, it } from "vitest";
import { ErrorCodes, MeshError } from "./errors.js";
import { createLogger, serializeError, traceFields } from "./logger.js";

/** A logger whose lines are kept, parsed. */
function captured() {
  const lines: Array<Record<string, unknown>> = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString("utf8").split("\n")) if (l) lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  return { log: createLogger("test", { destination }), lines };
}

describe("createLogger", () => {
  it("logs an error as an error: type, message, stack, code, retryable and its cause", () => {
    const { log, lines } = captured();
    const cause = new Error("ECONNREFUSED 127.0.0.1:5432");
    log.warn({ err: new MeshError(ErrorCodes.ProviderUnreachable, "cannot reach pg-main", { cause, retryable: true }) }, "provisioning failed");
    const err = lines[0]!.err as Record<string, unknown>;
    expect(err).toMatchObject({ type: "MeshError", message: "cannot reach pg-main", code: "ProviderUnreachable", retryable: true });
    expect(err.stack).toMatch(/^MeshError: cannot reach pg-main\n\s+at /);
    expect(err.cause).toMatchObject({ type: "Error", message: "ECONNREFUSED 127.0.0.1:5432" });
    expect((err.cause as Record<string, unknown>).stack).toMatch(/at /);
  });

  it("keeps no other field of an error, which for a driver can be the statement with a password in it", () => {
    const { log, lines } = captured();
    const driver = Object.assign(new Error("syntax error"), { sql: "CREATE USER a IDENTIFIED BY 'hunter2'", command: { args: ["AUTH", "hunter2"] } });
    log.error({ err: new MeshError(ErrorCodes.ProviderMisconfigured, "create failed", { cause: driver }), password: "hunter2" }, "failed");
    const text = JSON.stringify(lines[0]);
    expect(text).not.toContain("hunter2");
    expect(lines[0]!.password).toBe("[redacted]");
  });

  it("keeps a string or plain value logged as err as it is, still redacted", () => {
    const { log, lines } = captured();
    log.info({ err: "closed" }, "a");
    log.info({ err: { config: { password: "hunter2" } } }, "b");
    expect(lines[0]!.err).toBe("closed");
    expect(JSON.stringify(lines[1])).not.toContain("hunter2");
  });

  it("adds no trace fields outside a span", () => {
    const { log, lines } = captured();
    log.info("outside");
    expect(Object.keys(lines[0]!)).not.toContain("trace_id");
  });
});

describe("serializeError", () => {
  it("stops at a depth of five causes, and follows an AggregateError's errors", () => {
    let e: Error = new Error("e0");
    for (let i = 1; i <= 8; i++) e = new Error(`e${i}`, { cause: e });
    let s = serializeError(e) as { cause?: unknown };
    let depth = 0;
    while (s.cause) {
      s = s.cause as { cause?: unknown };
      depth++;
    }
    expect(depth).toBe(5);
    expect(serializeError(new AggregateError([new Error("a"), "b"], "both"))).toMatchObject({ type: "AggregateError", errors: [{ message: "a" }, "b"] });
  });
});

describe("traceFields", () => {
  it("names the span a context holds in OpenTelemetry's pino field names", () => {
    const ctx = trace.setSpanContext(ROOT_CONTEXT, { traceId: "0af7651916cd43dd8448eb211c80319c", spanId: "b7ad6b7169203331", traceFlags: TraceFlags.SAMPLED });
    expect(traceFields(ctx)).toEqual({ trace_id: "0af7651916cd43dd8448eb211c80319c", span_id: "b7ad6b7169203331", trace_flags: "01" });
    expect(traceFields(ROOT_CONTEXT)).toEqual({});
  });
});
