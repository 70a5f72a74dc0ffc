#!/usr/bin/env node
import { runCli } from './run.js';

const code = await runCli(process.argv.slice(2));
process.exitCode = code;
// A command that failed may have opened listeners before failing: do not linger.
if (code !== 0) process.exit(code);
