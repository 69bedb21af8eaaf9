#!/usr/bin/env node
/** meshctl, the operator's command: parses the command line with the commands of program.ts. */
import { program } from "./program.js";

await program.parseAsync(process.argv);
