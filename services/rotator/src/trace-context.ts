/**
 * The rotation's trace context as a stored W3C `traceparent` string, so that whichever rotator
 * instance carries a rotation on (after a crash) and every holder joins the same trace. Defined
 * in @mesh/shared, where the SDK's holders read it too.
 */
export { contextOfTraceparent, traceparentOf } from "@mesh/shared/runtime";
