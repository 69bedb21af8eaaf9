#!/usr/bin/env node
// meshctl's entry point as npm links it. It exists before the build (npm links bins at
// install time, before the root `prepare` script compiles dist/), and loads the build.
import { existsSync } from "node:fs";

const main = new URL("../dist/main.js", import.meta.url);
if (!existsSync(main)) {
  process.stderr.write("meshctl is not built yet: run `npm run build` (or `npx tsc -b`) in the repository root.\n");
  process.exit(1);
}
await import(main.href);
