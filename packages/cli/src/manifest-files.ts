/**
 * Reading manifest files for `apply` and `up`: every file parsed and validated on the client,
 * so a bad file is reported with all its problems before anything is sent.
 */
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { errorMessage, type ManifestDoc } from "@mesh/shared";
import { parseManifestText } from "@mesh/shared/manifest-text";

/** The documents of one file. */
export interface ManifestFile {
  /** The file name as given (`-` is shown as `<stdin>`). */
  source: string;
  documents: ManifestDoc[];
}

/** One problem, located by file and document (no document: the file itself). */
export interface FileProblem {
  source: string;
  /** 0-based index of the document in its file. */
  document?: number;
  /** Path in the document, like `requires[0].kind`; empty for the document itself. */
  path?: string;
  message: string;
}

export type LoadResult = { ok: true; files: ManifestFile[] } | { ok: false; problems: FileProblem[] };

/** How files and standard input are read; tests pass their own. */
export interface FileReader {
  readFile(path: string): Promise<string>;
  readStdin(): Promise<string>;
  /** The manifest files of `path` when it is a directory ({@link manifestFilesIn}); undefined when it is not one. */
  listDirectory?(path: string): Promise<string[] | undefined>;
}

/** Whether a directory entry is read by `-f DIR`: a `.yaml` or `.yml` name, not hidden (editors' lock files are). */
export function isManifestFileName(name: string): boolean {
  return !name.startsWith(".") && /\.ya?ml$/i.test(name);
}

/**
 * The files `-f DIR` reads: every regular file (or link to one) directly in `dir` whose name
 * {@link isManifestFileName}, sorted by name; subdirectories are not read. Undefined when `dir`
 * is not a directory.
 */
export async function manifestFilesIn(dir: string): Promise<string[] | undefined> {
  const info = await stat(dir).catch(() => undefined);
  if (!info?.isDirectory()) return undefined;
  const names = (await readdir(dir)).filter(isManifestFileName).sort();
  const files = await Promise.all(names.map(async (n) => ((await stat(join(dir, n)).catch(() => undefined))?.isFile() ? join(dir, n) : undefined)));
  return files.filter((f): f is string => f !== undefined);
}

/** Reads from the file system and the process's standard input. */
export const processReader: FileReader = {
  readFile: (path) => readFile(path, "utf8"),
  listDirectory: manifestFilesIn,
  async readStdin() {
    const chunks: Buffer[] = [];
    for await (const c of process.stdin) chunks.push(typeof c === "string" ? Buffer.from(c) : (c as Buffer));
    return Buffer.concat(chunks).toString("utf8");
  },
};

/** The name a file is shown under. */
export function sourceName(file: string): string {
  return file === "-" ? "<stdin>" : file;
}

/**
 * Reads and validates every file (`-` is standard input; a directory stands for its manifest
 * files, {@link manifestFilesIn}). The result holds documents only
 * when no file has a problem; a Provider or Module defined in two files is a problem too.
 */
export async function loadManifestFiles(names: readonly string[], reader: FileReader = processReader): Promise<LoadResult> {
  const problems: FileProblem[] = [];
  const files: ManifestFile[] = [];
  if (names.length === 0) return { ok: false, problems: [{ source: "meshctl", message: "no file given; name one with -f FILE (or -f - for standard input)" }] };
  const paths: string[] = [];
  for (const name of names) {
    const listed = name === "-" ? undefined : await reader.listDirectory?.(name);
    if (listed === undefined) paths.push(name);
    else if (listed.length) paths.push(...listed);
    else problems.push({ source: name, message: "is a directory with no .yaml or .yml file directly in it (subdirectories are not read)" });
  }
  for (const name of paths) {
    const source = sourceName(name);
    let text: string;
    try {
      text = name === "-" ? await reader.readStdin() : await reader.readFile(name);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      const why =
        code === "ENOENT" ? "no such file" : code === "EISDIR" ? "is a directory, give a file" : code === "EACCES" ? "permission denied" : errorMessage(e);
      problems.push({ source, message: `cannot read: ${why}` });
      continue;
    }
    const parsed = parseManifestText(text);
    if (!parsed.ok) {
      for (const p of parsed.problems) problems.push({ source, document: p.document, path: p.path, message: p.message });
      continue;
    }
    files.push({ source, documents: parsed.documents });
  }
  // The same document in two files: the later one would silently win on the server.
  const seen = new Map<string, { source: string; document: number }>();
  for (const f of files) {
    f.documents.forEach((d, i) => {
      const id = `${d.kind}/${d.name}`;
      const first = seen.get(id);
      if (first && first.source !== f.source) {
        problems.push({ source: f.source, document: i, path: "name", message: `${id} is also defined by ${first.source} document ${first.document}` });
      } else if (!first) seen.set(id, { source: f.source, document: i });
    });
  }
  return problems.length ? { ok: false, problems } : { ok: true, files };
}

/** One line per problem: `FILE: document N: path: message`. */
export function formatFileProblems(problems: readonly FileProblem[]): string {
  return problems
    .map((p) => {
      const where = p.document === undefined ? "" : `document ${p.document}: `;
      const path = p.path ? `${p.path}: ` : "";
      return `${p.source}: ${where}${path}${p.message}`;
    })
    .join("\n");
}

/**
 * Where document `index` of the files sent together came from (the server numbers the
 * documents of one request from 0).
 */
export function locateDocument(files: readonly ManifestFile[], index: number): { source: string; document: number } {
  let offset = 0;
  for (const f of files) {
    if (index < offset + f.documents.length) return { source: f.source, document: index - offset };
    offset += f.documents.length;
  }
  return { source: files.map((f) => f.source).join(", ") || "request", document: index };
}

/** The nodes named by the parts of the modules in `files`, in order of first mention. */
export function nodesOfParts(files: readonly ManifestFile[]): string[] {
  const nodes: string[] = [];
  for (const f of files) {
    for (const d of f.documents) {
      if (d.kind !== "Module") continue;
      for (const p of d.parts) if (!nodes.includes(p.node)) nodes.push(p.node);
    }
  }
  return nodes;
}
