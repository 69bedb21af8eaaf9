/**
 * The NATS micro protocol, served directly: every service answers `$SRV.PING`, `$SRV.INFO` and
 * `$SRV.STATS` (each also with its name, and with its name and instance id), so the NATS tooling
 * (`nats micro ls`, `nats micro stats mesh-rotator`) lists the mesh's services, their instances,
 * versions and the requests each endpoint served. The shapes are the protocol's
 * (`io.nats.micro.v1.*_response`); `@nats-io/services` is not used, as its only release for this
 * client line is a pre-release that brings a second copy of the client.
 *
 * The protocol's words and shapes, here; answering it on a connection is micro-service.ts's.
 */

/** The protocol's three verbs. */
export const MICRO_VERBS = ["PING", "INFO", "STATS"] as const;
export type MicroVerb = (typeof MICRO_VERBS)[number];

/** What an instance says of itself. `name` is the protocol's: letters, digits, `-` and `_`. */
export interface MicroService {
  name: string;
  version: string;
  description: string;
  metadata?: Record<string, string>;
}

/** One endpoint's counts, in the protocol's STATS shape (times in nanoseconds). */
export interface MicroEndpointStats {
  name: string;
  subject: string;
  queue_group: string;
  num_requests: number;
  num_errors: number;
  last_error: string;
  processing_time: number;
  average_processing_time: number;
}

/** The endpoints served on one connection, and what each served. */
export class MicroEndpoints {
  private readonly endpoints: MicroEndpointStats[] = [];

  /** Registers `subject` served in queue group `queue`; the returned function records one request (`error` when it failed). */
  add(subject: string, queue: string): (elapsedMs: number, error?: string) => void {
    const e: MicroEndpointStats = {
      name: endpointName(subject),
      subject,
      queue_group: queue,
      num_requests: 0,
      num_errors: 0,
      last_error: "",
      processing_time: 0,
      average_processing_time: 0,
    };
    this.endpoints.push(e);
    return (elapsedMs, error) => {
      e.num_requests++;
      e.processing_time += Math.round(elapsedMs * 1e6);
      e.average_processing_time = Math.round(e.processing_time / e.num_requests);
      if (error !== undefined) {
        e.num_errors++;
        e.last_error = error;
      }
    };
  }

  /** Every endpoint's counts, copied. */
  stats(): MicroEndpointStats[] {
    return this.endpoints.map((e) => ({ ...e }));
  }
}

/** An endpoint's name in the protocol's alphabet, from the subject it serves (`mesh.apply` → `mesh-apply`). */
export function endpointName(subject: string): string {
  return subject.replace(/[^A-Za-z0-9_-]+/g, "-").replace(/^-+|-+$/g, "") || "endpoint";
}

/** The subjects an instance of service `name` with id `id` answers on: each verb alone, with the name, and with both. */
export function microSubjects(name: string, id: string): string[] {
  return MICRO_VERBS.flatMap((v) => [`$SRV.${v}`, `$SRV.${v}.${name}`, `$SRV.${v}.${name}.${id}`]);
}

/** What an identity that runs service `name` may subscribe to for the protocol, whatever its instances' ids. */
export function microPermissions(name: string): string[] {
  // Every instance's subjects, the id a wildcard.
  return microSubjects(name, "*");
}

/** The protocol's answer to `verb` of instance `id` of `service`, started at `started`, with `endpoints`. */
export function microResponse(verb: MicroVerb, service: MicroService, id: string, started: Date, endpoints: MicroEndpointStats[]): Record<string, unknown> {
  const base = { name: service.name, id, version: service.version, metadata: service.metadata ?? {} };
  switch (verb) {
    case "PING":
      return { type: "io.nats.micro.v1.ping_response", ...base };
    case "INFO":
      return {
        type: "io.nats.micro.v1.info_response",
        ...base,
        description: service.description,
        endpoints: endpoints.map((e) => ({ name: e.name, subject: e.subject, queue_group: e.queue_group, metadata: null })),
      };
    case "STATS":
      return { type: "io.nats.micro.v1.stats_response", ...base, started: started.toISOString(), endpoints };
  }
}
