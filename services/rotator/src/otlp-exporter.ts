/**
 * A minimal OTLP/HTTP JSON span exporter (the `v1/traces` request of the OTLP specification),
 * so the rotator exports spans with no dependency beyond the tracing SDK.
 */
import { ExportResultCode, type ExportResult } from "@opentelemetry/core";
import type { ReadableSpan, SpanExporter } from "@opentelemetry/sdk-trace-base";

const hr = (t: [number, number]) => (BigInt(t[0]) * 1_000_000_000n + BigInt(t[1])).toString();
const attr = (attrs: Record<string, unknown>) =>
  Object.entries(attrs).map(([key, v]) => ({
    key,
    value: typeof v === "number" ? (Number.isInteger(v) ? { intValue: v } : { doubleValue: v }) : typeof v === "boolean" ? { boolValue: v } : { stringValue: String(v) },
  }));

/** Posts finished spans as OTLP JSON to `url` (e.g. `http://collector:4318/v1/traces`). */
export class OtlpJsonExporter implements SpanExporter {
  constructor(
    private readonly url: string,
    private readonly service: string,
  ) {}

  export(spans: ReadableSpan[], done: (r: ExportResult) => void): void {
    const body = {
      resourceSpans: [
        {
          resource: { attributes: attr({ "service.name": this.service }) },
          scopeSpans: [
            {
              scope: { name: "mesh" },
              spans: spans.map((s) => ({
                traceId: s.spanContext().traceId,
                spanId: s.spanContext().spanId,
                ...(s.parentSpanContext?.spanId ? { parentSpanId: s.parentSpanContext.spanId } : {}),
                name: s.name,
                kind: s.kind + 1,
                startTimeUnixNano: hr(s.startTime),
                endTimeUnixNano: hr(s.endTime),
                attributes: attr(s.attributes),
                status: { code: s.status.code },
              })),
            },
          ],
        },
      ],
    };
    fetch(this.url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) }).then(
      (r) => done({ code: r.ok ? ExportResultCode.SUCCESS : ExportResultCode.FAILED }),
      (e: unknown) => done({ code: ExportResultCode.FAILED, error: e as Error }),
    );
  }

  async shutdown(): Promise<void> {}
}
