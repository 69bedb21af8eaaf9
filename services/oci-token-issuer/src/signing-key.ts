/**
 * The issuer's signing key and the certificate the registry trusts (its `auth.token.rootcertbundle`):
 * an ECDSA P-256 key and a self-signed X.509 certificate over it, made once with `openssl` (Node
 * can make the key but not a certificate) in the state directory, and read from there after.
 */
import { execFile } from "node:child_process";
import { X509Certificate, createPrivateKey, type KeyObject } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { ErrorCodes, MeshError, errorMessage } from "@mesh/shared";

const run = promisify(execFile);

/** The file names under the state directory. */
export const SIGNING_KEY_FILE = "signing-key.pem";
export const CERTIFICATE_FILE = "signing-cert.pem";
/** How long the certificate is valid: ten years; the registry checks it on every token. */
const CERTIFICATE_DAYS = 3650;

export interface SigningKey {
  privateKey: KeyObject;
  /** The certificate, DER, for the tokens' `x5c` header. */
  certificateDer: Buffer;
  /** Where the certificate is, for the registry's `rootcertbundle`. */
  certificatePath: string;
}

/**
 * Reads the key and certificate of `stateDir`, making both first when neither is there. Throws
 * `ProviderMisconfigured` when only one is there (a half-copied state directory), or when
 * `openssl` cannot make them, saying what to do.
 */
export async function ensureSigningKey(stateDir: string, subject = "mesh-oci-token-issuer"): Promise<SigningKey> {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  const keyPath = join(stateDir, SIGNING_KEY_FILE);
  const certificatePath = join(stateDir, CERTIFICATE_FILE);
  const [hasKey, hasCert] = [existsSync(keyPath), existsSync(certificatePath)];
  if (hasKey !== hasCert) {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `${stateDir} holds ${hasKey ? SIGNING_KEY_FILE : CERTIFICATE_FILE} without ${hasKey ? CERTIFICATE_FILE : SIGNING_KEY_FILE}; restore the missing file, or remove the other to make a new pair (the registry must then trust the new ${CERTIFICATE_FILE})`,
    );
  }
  if (!hasKey) {
    // Made under temporary names and renamed, so a crash never leaves half a pair.
    const [tmpKey, tmpCert] = [`${keyPath}.tmp`, `${certificatePath}.tmp`];
    try {
      await run("openssl", [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        tmpKey,
        "-out",
        tmpCert,
        "-days",
        String(CERTIFICATE_DAYS),
        "-subj",
        `/CN=${subject}`,
      ]);
    } catch (e) {
      rmSync(tmpKey, { force: true });
      rmSync(tmpCert, { force: true });
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `cannot make the token signing key with openssl (${errorMessage(e)}); install it (apt-get install -y openssl)`,
        { cause: e },
      );
    }
    chmodSync(tmpKey, 0o600);
    renameSync(tmpCert, certificatePath);
    renameSync(tmpKey, keyPath);
  }
  const privateKey = createPrivateKey(readFileSync(keyPath));
  const certificate = new X509Certificate(readFileSync(certificatePath));
  if (!certificate.checkPrivateKey(privateKey)) {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `${certificatePath} is not the certificate of ${keyPath}; restore the pair, or remove both to make a new one`,
    );
  }
  return { privateKey, certificateDer: Buffer.from(certificate.raw), certificatePath };
}
