/**
 * The writer of the audit trail (audit.ts says what is recorded, and when).
 */
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import { ErrorCodes, MeshError, errorMessage } from "./errors.js";
import { recordJson } from "./record-version.js";
import { subjects } from "./subjects.js";
import type { AuditRecord, AuditTarget } from "./audit.js";

/** Drops the undefined entries of `t` (the record's schema has none). */
function defined(t: AuditTarget | undefined): Record<string, string | number | boolean | string[]> | undefined {
  if (!t) return undefined;
  const out = Object.fromEntries(Object.entries(t).filter(([, v]) => v !== undefined)) as Record<string, string | number | boolean | string[]>;
  return Object.keys(out).length ? out : undefined;
}

/** Writes a service's records to the trail; see the file comment. */
export class AuditLog {
  private readonly js: JetStreamClient;

  constructor(
    nc: NatsConnection,
    /** The service (`resolver`, `provisioner`, …): its records go on `mesh.audit.<service>`, all its identity may publish there. */
    private readonly service: string,
    /** The instance's name and its node, in every record; default `<service>@<host>/<pid>` on `MESH_NODE` (else the host). */
    private readonly instance: { name: string; node: string } = {
      name: `${service}@${hostname()}/${process.pid}`,
      node: process.env.MESH_NODE || hostname(),
    },
    timeoutMs = 5_000,
    /** Where its records go instead of `mesh.audit.<service>` (a console session's: its operator's own subject). */
    private readonly subject = subjects.audit(service),
  ) {
    this.js = jetstream(nc, { timeout: timeoutMs });
  }

  /** A new request's id. */
  static newId(): string {
    return randomUUID();
  }

  /**
   * Records `entry`; throws MeshError `Unavailable` (retryable) when the trail did not take it,
   * which the caller answers with instead of serving the request.
   */
  async record(entry: Omit<AuditRecord, "at" | "service" | "node" | "target"> & { target?: AuditTarget }): Promise<void> {
    const record: AuditRecord = {
      ...entry,
      target: defined(entry.target),
      at: new Date().toISOString(),
      service: this.instance.name,
      node: this.instance.node,
    };
    if (!record.target) delete record.target;
    try {
      // The message id makes a retried publish of the same record one record.
      await this.js.publish(this.subject, recordJson(record), { msgID: `${record.id}:${record.phase}` });
    } catch (e) {
      throw new MeshError(
        ErrorCodes.Unavailable,
        `refused: the audit trail (stream MESH_AUDIT) did not record this request (${errorMessage(e)}), and nothing is served unrecorded; try again, and if it goes on, see that the stream exists (meshctl up or bootstrap makes it) and is not full`,
        { cause: e, retryable: true },
      );
    }
  }
}
