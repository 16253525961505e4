/** Server-sent events parsed from a byte stream (the server's framing: `id`, `event`,
 * `data`; comments and keep-alives skipped). */

/** One event of a stream: its `id` (absent on `status` and `end`), its name and its data
 * (decoded from JSON). */
export interface ServerEvent {
  id?: string;
  event: string;
  data: unknown;
}

/** The events of `body`, as they arrive (a block with an id and no data as an event named
 * "", so a reader can keep its id). */
export async function* parseEvents(
  body: ReadableStream<Uint8Array>,
): AsyncGenerator<ServerEvent> {
  const decoder = new TextDecoder();
  let buffer = "";
  let name = "message";
  let data: string[] = [];
  let id: string | undefined;
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        let line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          if (data.length === 0 && id !== undefined) {
            // An id with no data still moves the stream's last event id (named "").
            yield { id, event: "", data: null };
          } else if (data.length > 0) {
            const text = data.join("\n");
            let parsed: unknown = text;
            try {
              parsed = JSON.parse(text);
            } catch {
              // Not JSON: kept as text.
            }
            yield id === undefined ? { event: name, data: parsed } : { id, event: name, data: parsed };
          }
          name = "message";
          data = [];
          id = undefined;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") name = value;
        else if (field === "data") data.push(value);
        else if (field === "id") id = value;
      }
    }
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => undefined);
  }
}
