/** A writable stream that keeps every log line a logger writes, for assertions on logs. */
import { Writable } from "node:stream";

export class LogCapture extends Writable {
  readonly lines: string[] = [];
  private partial = "";
  override _write(chunk: Buffer, _enc: BufferEncoding, cb: () => void): void {
    const text = this.partial + chunk.toString("utf8");
    const parts = text.split("\n");
    this.partial = parts.pop() ?? "";
    this.lines.push(...parts.filter((l) => l.length > 0));
    cb();
  }
  /** Everything logged so far, as one string. */
  get text(): string {
    return this.lines.join("\n") + this.partial;
  }
}
