/**
 * OpenTelemetry context through NATS headers (W3C `traceparent`/`tracestate`).
 * Only `@opentelemetry/api` here: without an SDK registered these are cheap no-ops; a process
 * that exports spans registers one in its main.
 */
import { context, propagation, trace, type Context, type Span, type TextMapGetter, type TextMapPropagator, type TextMapSetter, type TracerProvider } from "@opentelemetry/api";
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

/** The tracer of a mesh component. */
export function tracer(name: string) {
  return trace.getTracer(`mesh.${name}`);
}

/**
 * Runs `fn` inside a span that is a child of the context carried by `h`; the span ends when
 * `fn` settles and records an exception if it throws.
 */
export async function withSpan<T>(
  component: string,
  name: string,
  attributes: Record<string, string | number | boolean>,
  h: MsgHdrs | undefined,
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  return tracer(component).startActiveSpan(name, { attributes }, contextFrom(h), async (span) => {
    try {
      return await fn(span);
    } catch (e) {
      span.recordException(e as Error);
      span.setStatus({ code: 2, message: (e as Error).message });
      throw e;
    } finally {
      span.end();
    }
  });
}

/**
 * Registers a tracer provider and a propagator with the API instance the mesh's packages use.
 * An SDK may bring its own (older) copy of `@opentelemetry/api`, whose globals the mesh's copy
 * does not see; registering through this function avoids that. Returns false if one was set.
 */
export function registerTracing(provider: unknown, propagator: unknown): boolean {
  const ok = trace.setGlobalTracerProvider(provider as TracerProvider);
  propagation.setGlobalPropagator(propagator as TextMapPropagator);
  return ok;
}
