/**
 * OpenTelemetry context through NATS headers (W3C `traceparent`/`tracestate`).
 * Only `@opentelemetry/api` here: without an SDK registered these are cheap no-ops; a process
 * that exports spans registers one in its main.
 */
import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  trace,
  TraceFlags,
  type Attributes,
  type Context,
  type ContextManager,
  type Span,
  type TextMapGetter,
  type TextMapPropagator,
  type TextMapSetter,
  type TracerProvider,
} from "@opentelemetry/api";
import { headers as natsHeaders, type MsgHdrs } from "@nats-io/transport-node";

const setter: TextMapSetter<MsgHdrs> = {
  set(carrier, key, value) {
    carrier.set(key, value);
  },
};

/** Reads a header; a missing one is `""` in the NATS client and must be `undefined` here. */
export const natsHeaderGetter: TextMapGetter<MsgHdrs | undefined> = {
  keys(carrier) {
    return carrier ? carrier.keys() : [];
  },
  get(carrier, key) {
    if (!carrier) return undefined;
    const v = carrier.get(key);
    return v === "" ? undefined : v;
  },
};

/** Headers carrying the given (default: active) context, to pass to publish or request. */
export function traceHeaders(ctx: Context = context.active(), into?: MsgHdrs): MsgHdrs {
  const h = into ?? natsHeaders();
  propagation.inject(ctx, h, setter);
  return h;
}

/**
 * Whether a propagator is registered, so that the context a message carries is worth reading:
 * a hot path asks before it decodes a message's headers for {@link contextFrom}.
 */
export function propagating(): boolean {
  return propagation.fields().length > 0;
}

/** The context a message carries, to start a child span in. */
export function contextFrom(h: MsgHdrs | undefined): Context {
  return propagation.extract(context.active(), h, natsHeaderGetter);
}

/**
 * The version of the OpenTelemetry semantic conventions the mesh's spans follow: the messaging
 * spans of semconv 1.27.0 (status Development there), `messaging.system` = `nats`.
 */
export const SEMCONV_VERSION = "1.27.0";

/** The schema URL of {@link SEMCONV_VERSION}, on every tracer of the mesh. */
export const SEMCONV_SCHEMA_URL = `https://opentelemetry.io/schemas/${SEMCONV_VERSION}`;

/** The tracer of a mesh component (`mesh.<name>`), with the semconv schema URL. */
export function tracer(name: string) {
  return trace.getTracerProvider().getTracer(`mesh.${name}`, undefined, { schemaUrl: SEMCONV_SCHEMA_URL });
}

/** `messaging.operation.type` values the mesh uses: a message published, a message handled. */
export type MessagingOperation = "send" | "process";

/**
 * The messaging attributes of a span for one NATS message on `subject` (semconv 1.27.0):
 * `messaging.system`, `messaging.destination.name` (the subject), `messaging.destination.template`
 * (a {@link SubjectTemplates} entry), `messaging.operation.type` and `.name` (`publish` for a send,
 * `process`), and for a JetStream consumer its durable as `messaging.consumer.group.name`.
 */
export function messagingAttributes(op: MessagingOperation, subject: string, template: string, opts: { consumerGroup?: string } = {}): Attributes {
  return {
    "messaging.system": "nats",
    "messaging.destination.name": subject,
    "messaging.destination.template": template,
    "messaging.operation.type": op,
    "messaging.operation.name": op === "send" ? "publish" : "process",
    ...(opts.consumerGroup ? { "messaging.consumer.group.name": opts.consumerGroup } : {}),
  };
}

/**
 * The mesh's own attributes of a span about one holder's part in a rotation (beside the
 * messaging ones): `mesh.rotation`, `mesh.grant`, `mesh.node`, `mesh.part`, `mesh.holder`
 * (`<node>/<part>` for an agent, `<node>/<part>/<instance>` for an SDK holder), `mesh.generation`.
 */
export function holderSpanAttributes(h: { rotation?: string; grant: string; node: string; part: string; holder: string; generation: number }): Attributes {
  return {
    ...(h.rotation ? { "mesh.rotation": h.rotation } : {}),
    "mesh.grant": h.grant,
    "mesh.node": h.node,
    "mesh.part": h.part,
    "mesh.holder": h.holder,
    "mesh.generation": h.generation,
  };
}

/**
 * Starts a PRODUCER span `publish <template>` for one message to `subject`, a child of
 * `parent` (default: the active context), with `attributes` (the mesh's own) beside the
 * messaging ones; `headers` carry it to the message's consumer. End the span once published.
 */
export function startProducerSpan(
  component: string,
  subject: string,
  template: string,
  attributes: Attributes,
  parent: Context = context.active(),
): { span: Span; headers: MsgHdrs } {
  const span = tracer(component).startSpan(
    `publish ${template}`,
    { kind: SpanKind.PRODUCER, attributes: { ...messagingAttributes("send", subject, template), ...attributes } },
    parent,
  );
  return { span, headers: traceHeaders(trace.setSpan(parent, span)) };
}

/**
 * Runs `fn` (which publishes one message to `subject` with `headers`) in a PRODUCER span, as
 * {@link startProducerSpan}; the span ends when `fn` settles and records an exception if it throws.
 */
export async function withProducerSpan<T>(
  component: string,
  subject: string,
  template: string,
  attributes: Attributes,
  parent: Context,
  fn: (headers: MsgHdrs) => Promise<T>,
): Promise<T> {
  const { span, headers } = startProducerSpan(component, subject, template, attributes, parent);
  return endWith(span, () => fn(headers));
}

/**
 * Runs `fn` in a CONSUMER span `process <template>` for a message received on `subject`: a
 * **child** of the span its headers carry (the producer's), else of `fallback` (a rotation's
 * stored context, when the message came some other way); semconv allows the parent for a
 * single message, and a child keeps a rotation's fan-out one tree. The span ends when `fn`
 * settles and records an exception if it throws.
 */
export async function withConsumerSpan<T>(
  component: string,
  subject: string,
  template: string,
  attributes: Attributes,
  h: MsgHdrs | undefined,
  fn: (span: Span) => Promise<T>,
  opts: { consumerGroup?: string; fallback?: Context } = {},
): Promise<T> {
  const { name, options, parent } = consumerSpanArgs(subject, template, attributes, h, opts);
  return tracer(component).startActiveSpan(name, options, parent, (span) => endWith(span, fn));
}

/** {@link withConsumerSpan}'s span, started and not active, for work that outlives one call (end it). */
export function startConsumerSpan(
  component: string,
  subject: string,
  template: string,
  attributes: Attributes,
  h: MsgHdrs | undefined,
  opts: { consumerGroup?: string; fallback?: Context } = {},
): Span {
  const { name, options, parent } = consumerSpanArgs(subject, template, attributes, h, opts);
  return tracer(component).startSpan(name, options, parent);
}

function consumerSpanArgs(
  subject: string,
  template: string,
  attributes: Attributes,
  h: MsgHdrs | undefined,
  opts: { consumerGroup?: string; fallback?: Context },
) {
  let parent = contextFrom(h);
  if (!trace.getSpanContext(parent) && opts.fallback) parent = opts.fallback;
  const attrs = { ...messagingAttributes("process", subject, template, opts), ...attributes };
  return { name: `process ${template}`, options: { kind: SpanKind.CONSUMER, attributes: attrs }, parent };
}

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

async function endWith<T>(span: Span, fn: (span: Span) => Promise<T>): Promise<T> {
  try {
    return await fn(span);
  } catch (e) {
    span.recordException(e as Error);
    span.setStatus({ code: 2, message: (e as Error).message });
    throw e;
  } finally {
    span.end();
  }
}

/**
 * Registers a tracer provider, a propagator and (when given) a context manager with the API
 * instance the mesh's packages use.
 * An SDK may bring its own (older) copy of `@opentelemetry/api`, whose globals the mesh's copy
 * does not see; registering through this function avoids that. Returns false if one was set.
 */
export function registerTracing(provider: unknown, propagator: unknown, contextManager?: unknown): boolean {
  const ok = trace.setGlobalTracerProvider(provider as TracerProvider);
  propagation.setGlobalPropagator(propagator as TextMapPropagator);
  // Without one, a span started active is not seen by the code it runs (nor by the log lines').
  if (contextManager) context.setGlobalContextManager((contextManager as ContextManager).enable());
  return ok;
}
