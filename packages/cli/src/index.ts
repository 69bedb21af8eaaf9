/**
 * @mesh/cli — meshctl's commands as functions (each takes its inputs and an output and
 * returns the exit code), so tests and other tools can call them without a process.
 */
export { ExitCodes, type ExitCode } from "./exit-codes.js";
export { CliError, isCliError } from "./cli-error.js";
export { bufferOutput, processOutput, type Output, type BufferedOutput } from "./output.js";
export { connectForCli, openStoreForCli, natsUrlFrom, natsUnreachableMessage, noJetStreamMessage } from "./connect.js";
export { isTcpPortFree } from "./local-nats.js";
export {
  loadManifestFiles,
  formatFileProblems,
  locateDocument,
  nodesOfParts,
  sourceName,
  processReader,
  type FileProblem,
  type FileReader,
  type LoadResult,
  type ManifestFile,
} from "./manifest-files.js";
export { runApply, sendApply, reportApply, formatAccepted, APPLY_TIMEOUT_MS, SETTLED_STATES, type ApplyOptions, type ApplyOutcome } from "./apply-command.js";
export {
  buildStatusReport,
  loadStatus,
  notProcessedError,
  toStatusGrant,
  type StatusReport,
  type StatusModule,
  type StatusGrant,
  type NotProcessedError,
} from "./status-report.js";
export { formatStatus, formatModule, formatNotProcessed, ageOf } from "./status-format.js";
export { runStatus, exposureWarnings, type StatusOptions } from "./status-command.js";
export { runGet, parseGetResource, checkGetName, GetResources, type GetOptions, type GetResource } from "./get-command.js";
export {
  loadMeshRecords,
  explainAll,
  moduleRows,
  grantRows,
  providerRows,
  type MeshRecords,
  type ModuleRow,
  type GrantRow,
  type ProviderRow,
} from "./get-report.js";
export { formatTable, formatModuleRows, formatGrantRows, formatProviderRows } from "./get-format.js";
export { runWait, followModules, reportTimeout, WAIT_TIMEOUT_MS, type WaitOptions } from "./wait-command.js";
export {
  waitForModules,
  judge,
  waitResult,
  waitLine,
  modulesRevisionNow,
  manifestRevisionOf,
  parseModuleState,
  MODULE_STATE_LIST,
  type ModuleTarget,
  type ModuleSeen,
  type ModuleWaitResult,
  type Verdict,
} from "./module-wait.js";
export { explainModule, RequirementStates, type Explanation, type ExplainInput, type RequirementExplanation, type RequirementState } from "./explain.js";
export { formatExplanation } from "./explain-format.js";
export { runExplain, loadExplanation, type ExplainOptions } from "./explain-command.js";
export { runUp, chooseNodes, serviceSpecs, waitForResolver, displayPath, DEFAULT_NODE, type UpOptions } from "./up-command.js";
export { Supervisor, type ServiceSpec, type ChildEvent, type SupervisorOptions } from "./supervisor.js";
export {
  startLiveStatus,
  liveLine,
  type LiveLine,
  moduleChangeLines,
  grantChangeLines,
  formatSnapshot,
  clock,
  type LiveStatus,
  type MeshSnapshot,
} from "./live-status.js";
export { findNatsServer, loopbackAddress, startLocalNats, type StartedNats } from "./local-nats.js";
export { bundleFileOf, serviceMain, upPaths, type ServiceProgram, type UpPaths } from "./paths.js";
export { runVerify, formatVerify, VERIFY_TIMEOUT_MS, type VerifyOptions } from "./verify-command.js";
export { runRotate, followRotation, alreadyRotatingError, ROTATE_REQUEST_TIMEOUT_MS, WAIT_GRACE_MS, type RotateOptions } from "./rotate-command.js";
export { caFilesOf, runCaRotate, type CaRotateOptions } from "./ca-command.js";
export { backupOrder, existingMasterKey, isMeshStream, readBackupKey, runBackup, runRestore } from "./backup-command.js";
export { collectStateFiles, putBackStateFiles, stateDirsOf, type StateDirs, type StateFile } from "./backup-state-files.js";
export { BACKUP_FORMAT, openBackup, readBackupHeader, sealBackup, type BackupContents, type BackupHeader } from "./backup-file.js";
export { runTrace, type TraceOptions } from "./trace-command.js";
export { retrying, retryPolicy, isRetryable, remainingMs, DEFAULT_DEADLINE_MS, type RetryPolicy } from "./retry.js";
export { findRotation, latestRotation, type FoundRotation } from "./rotation-records.js";
export {
  summarizeRotation,
  rotationProgress,
  progressLine,
  formatStarted,
  formatOutcome,
  traceRotation,
  formatTrace,
  type RotationSummary,
  type RotationProgress,
  type RotationTrace,
  type TraceHolder,
  type TraceEvent,
} from "./rotation-view.js";
export { toStatusRotation, type StatusRotation } from "./status-report.js";
export { formatRotationLine } from "./status-format.js";
export { checkGrantArg } from "./rotate-command.js";
export { checkRotationArg } from "./trace-command.js";
export { runConsole, startConsole, checkConsoleOptions, type ConsoleOptions, type RunningConsole } from "./console/command.js";
export { checkRequest, checkListen, parseListen, allowedHosts, isLoopback, DEFAULT_CONSOLE_LISTEN, type AccessPolicy, type Refusal } from "./console/access.js";
export { graphModel, grantPage, rotationTimeline, type GraphModel, type GrantPage, type RotationTimeline } from "./console/model.js";
export { notRunningMessage, requestService, type MeshService, type ServiceRequest } from "./service-request.js";
