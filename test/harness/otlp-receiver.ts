/**
 * An OTLP/HTTP receiver of the test's own, for processes that export spans with
 * `OTEL_EXPORTER_OTLP_ENDPOINT` set to its `url`: OTLP JSON decoded here (no collector is
 * packaged), every span kept with its process's resource and scope.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/** OTLP JSON as the exporter sends it (only what is read here). */
export interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
}
export interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: Array<{ key: string; value: OtlpValue }>;
}
export interface OtlpRequest {
  resourceSpans: Array<{
    resource: { attributes: Array<{ key: string; value: OtlpValue }> };
    scopeSpans: Array<{ scope: { name: string }; schemaUrl?: string; spans: OtlpSpan[] }>;
  }>;
}
/** A received span with its process's resource and scope. */
export interface Received {
  resource: Record<string, string>;
  scope: string;
  schemaUrl: string | undefined;
  span: OtlpSpan;
  attrs: Record<string, string | number | undefined>;
}

/** OTLP's span kinds, as numbers. */
export const KIND = { internal: 1, producer: 4, consumer: 5 } as const;

const flat = (attrs: Array<{ key: string; value: OtlpValue }>) =>
  Object.fromEntries(attrs.map((a) => [a.key, a.value.stringValue ?? (a.value.intValue !== undefined ? Number(a.value.intValue) : undefined)]));

/** A running receiver: its `url` (the endpoint to export to), the spans received so far, and its close. */
export interface OtlpReceiver {
  url: string;
  spans: Received[];
  readonly requests: number;
  close(): Promise<void>;
}

/** A small OTLP/HTTP receiver on a free port: POST /v1/traces with OTLP JSON, every span kept. */
export async function startReceiver(): Promise<OtlpReceiver> {
  const spans: Received[] = [];
  let requests = 0;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (d: Buffer) => chunks.push(d));
    req.on("end", () => {
      requests++;
      if (req.method !== "POST" || req.url !== "/v1/traces" || !String(req.headers["content-type"]).includes("json")) {
        res.writeHead(415).end();
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as OtlpRequest;
      for (const rs of body.resourceSpans) {
        const resource = flat(rs.resource.attributes) as Record<string, string>;
        for (const ss of rs.scopeSpans)
          for (const span of ss.spans) spans.push({ resource, scope: ss.scope.name, schemaUrl: ss.schemaUrl, span, attrs: flat(span.attributes) });
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    get requests() {
      return requests;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
