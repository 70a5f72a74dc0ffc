#!/usr/bin/env node
import { runCli } from './run.js';

const code = await runCli(process.argv.slice(2));
// Every command has finished its work (a gateway has closed within its shutdown deadline): a handle a
// library leaves behind must not keep the process, and its exit code, waiting.
process.exit(code);
