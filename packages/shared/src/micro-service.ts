/**
 * Answering the NATS micro protocol (micro.ts) on a service's connection: the endpoints an
 * instance lists are the subjects it serves through serveJson on the same connection
 * ({@link microEndpoints}), and what each served is counted there.
 */
import { randomBytes } from "node:crypto";
import type { NatsConnection } from "@nats-io/transport-node";
import { isInboxSubject } from "./inboxes.js";
import type { Logger } from "./logger.js";
import { MicroEndpoints, microResponse, microSubjects, type MicroService, type MicroVerb } from "./micro.js";

const registries = new WeakMap<NatsConnection, MicroEndpoints>();

/** The endpoints served on `nc` (made on first use). */
export function microEndpoints(nc: NatsConnection): MicroEndpoints {
  let r = registries.get(nc);
  if (!r) registries.set(nc, (r = new MicroEndpoints()));
  return r;
}

/**
 * Answers the protocol for `service` on `nc` until stopped, listing the endpoints served on `nc`.
 * Answers go only to an inbox (as serveJson's), so a request cannot make this identity publish
 * where its reply subject says.
 */
export function serveMicro(nc: NatsConnection, service: MicroService, log: Logger): { id: string; stop(): Promise<void> } {
  const id = randomBytes(11).toString("hex");
  const started = new Date();
  const endpoints = microEndpoints(nc);
  const subs = microSubjects(service.name, id).map((subject) => {
    const verb = subject.split(".")[1] as MicroVerb;
    const sub = nc.subscribe(subject);
    void (async () => {
      for await (const m of sub) {
        if (!m.reply || !isInboxSubject(m.reply)) continue;
        m.respond(JSON.stringify(microResponse(verb, service, id, started, endpoints.stats())));
      }
    })().catch((e: unknown) => log.warn({ err: e, subject }, "stopped answering the NATS micro protocol on a subject"));
    return sub;
  });
  return {
    id,
    async stop() {
      await Promise.all(subs.map((s) => s.drain().catch(() => undefined)));
    },
  };
}
