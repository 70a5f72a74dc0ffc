import { describe } from 'vitest';
import { e2bCases } from './cases.js';

// The E2B SDK through sandgate's embedded proxy, straight to the sandbox's address.
describe('E2B SDK through the embedded proxy', () => e2bCases('proxy'));
