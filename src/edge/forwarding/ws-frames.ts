/**
 * Tells data from control frames on a spliced WebSocket, passively: only frame heads are read (RFC 6455
 * §5.2: opcode in the first byte's low nibble, a 7-bit length, 16- or 64-bit extended lengths, a 4-byte
 * mask when MASK is set), payloads are skipped by length and never copied or unmasked. Activity is
 * recorded for data frames (text, binary, continuation) only: a WebSocket that only pings or pongs keeps
 * no sandbox awake. Bytes that are not WebSocket framing (another Upgrade protocol, or framing this does
 * not follow) make the scanner `broken`, and from then on every byte counts as data.
 */

/** Longest frame head: 2 bytes, 8 of extended length, 4 of mask. */
const MAX_HEAD = 14;

export class FrameScanner {
  /** Data frames whose head was read (tests compare these with ws's Receiver). */
  dataFrames = 0;
  controlFrames = 0;
  broken = false;
  private readonly head = new Uint8Array(MAX_HEAD);
  private headLen = 0;
  /** Payload bytes of the current frame still to skip. */
  private skip = 0;
  private inData = false;

  /** Feeds the next bytes; true when any of them belong to a data frame. */
  feed(b: Uint8Array): boolean {
    if (this.broken) return true;
    let data = false;
    let i = 0;
    while (i < b.length) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, b.length - i);
        this.skip -= n;
        i += n;
        if (this.inData) data = true;
        continue;
      }
      this.head[this.headLen++] = b[i++]!;
      const need = this.headLength();
      if (need < 0) {
        this.broken = true;
        return true;
      }
      if (need === 0 || this.headLen < need) continue;
      this.inData = (this.head[0]! & 0x08) === 0;
      if (this.inData) {
        this.dataFrames++;
        data = true;
      } else this.controlFrames++;
      this.skip = this.payloadLength();
      this.headLen = 0;
    }
    return data;
  }

  /** The head's full length once known, 0 while more bytes are needed for it, -1 when it is not framing. */
  private headLength(): number {
    if (this.headLen < 2) return 0;
    const b0 = this.head[0]!;
    const b1 = this.head[1]!;
    const len7 = b1 & 0x7f;
    const opcode = b0 & 0x0f;
    // Opcodes 3-7 and 0xB-0xF are reserved (§5.2); control frames are never fragmented and carry at most
    // 125 bytes (§5.5).
    if ((opcode > 2 && opcode < 8) || opcode > 10) return -1;
    if ((b0 & 0x08) !== 0 && (len7 > 125 || (b0 & 0x80) === 0)) return -1;
    const ext = len7 === 126 ? 2 : len7 === 127 ? 8 : 0;
    // The most significant bit of a 64-bit length must be 0 (§5.2).
    if (ext === 8 && this.headLen >= 3 && (this.head[2]! & 0x80) !== 0) return -1;
    return 2 + ext + ((b1 & 0x80) !== 0 ? 4 : 0);
  }

  private payloadLength(): number {
    const len7 = this.head[1]! & 0x7f;
    if (len7 < 126) return len7;
    if (len7 === 126) return (this.head[2]! << 8) | this.head[3]!;
    let n = 0;
    for (let k = 2; k < 10; k++) n = n * 256 + this.head[k]!;
    return n;
  }
}
