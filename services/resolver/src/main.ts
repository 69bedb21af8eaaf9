#!/usr/bin/env node
/** mesh-resolver: `NATS_URL` (default nats://127.0.0.1:4222). Runs until SIGINT/SIGTERM. */
import { runService } from "@mesh/shared";
import { startResolver } from "./resolver.js";

await runService("resolver", ({ store, log }) => startResolver({ store, log }));
