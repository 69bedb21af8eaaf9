/**
 * The rotation's trace context as a stored W3C `traceparent` string, so that whichever rotator
 * instance carries a rotation on (after a crash) and every holder joins the same trace.
 */
import { ROOT_CONTEXT, trace, TraceFlags, type Context, type Span } from "@opentelemetry/api";

/** `00-<trace id>-<span id>-<flags>` of a span; undefined for a non-recording no-op span. */
export function traceparentOf(span: Span): string | undefined {
  const sc = span.spanContext();
  if (!trace.isSpanContextValid(sc)) return undefined;
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & TraceFlags.SAMPLED ? 1 : 0).toString(16).padStart(2, "0")}`;
}

/** The context whose parent is the span a stored traceparent names (root context when there is none). */
export function contextOfTraceparent(traceparent: string | undefined): Context {
  const m = traceparent ? /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(traceparent) : null;
  if (!m) return ROOT_CONTEXT;
  return trace.setSpanContext(ROOT_CONTEXT, { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16), isRemote: true });
}
