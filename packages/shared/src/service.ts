/**
 * @mesh/shared/service: a service's process: its logger (pino) and its main (connect, open the
 * store, serve, stop on a signal).
 */
export { createLogger, type Logger, REDACT_PATHS, SECRET_FIELDS, type SerializedError, serializeError, traceFields } from "./logger.js";
export {
  checkSourceOfRecord,
  followIdentity,
  IDENTITY_CHECK_MS,
  type RunningService,
  runService,
  type ServiceContext,
  serviceMasterKey,
  sourceOfRecordProblem,
  unauthenticatedWarning,
} from "./service-main.js";
export { SERVICES, type ServiceName, serviceCommandLine, serviceHelp } from "./service-environment.js";
