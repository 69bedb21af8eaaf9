#!/usr/bin/env node
/** mesh-resolver: `NATS_URL` (default nats://127.0.0.1:4222). Runs until SIGINT/SIGTERM. */
import { meshVersion } from "@mesh/shared";
import { runService, serviceCommandLine } from "@mesh/shared/service";
import { observed } from "@mesh/telemetry";
import { startResolver } from "./resolver.js";

serviceCommandLine("resolver", meshVersion(import.meta.url));

await runService(
  "resolver",
  observed("mesh-resolver", meshVersion(import.meta.url), ({ store, log }) => startResolver({ store, log })),
);
