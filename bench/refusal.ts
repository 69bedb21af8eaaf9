/**
 * Whether the server holds a connection to its identity's permissions: a publish on a subject
 * no identity of the mesh is granted, refused or not. A benchmark says with it which
 * permissions were in force.
 */
import type { NatsConnection } from "@nats-io/transport-node";

/** A subject outside every identity's permissions, which nothing listens to. */
const OUTSIDE = "bench.refusal";

/** True when the server refuses `nc` a publish outside every identity's permissions (within 2 s). */
export async function refusesOutside(nc: NatsConnection): Promise<boolean> {
  const seen = new Promise<boolean>((resolve) => {
    void (async () => {
      for await (const s of nc.status()) {
        if (
          s.type === "error" &&
          /permissions violation/i.test(String((s as { error?: unknown }).error)) &&
          String((s as { error?: unknown }).error).includes(OUTSIDE)
        )
          return resolve(true);
      }
    })();
    setTimeout(() => resolve(false), 2_000).unref();
  });
  nc.publish(OUTSIDE, "");
  await nc.flush();
  return seen;
}
