package reservation

// VarsHold is varsHold, for the tests outside the package.
var VarsHold = varsHold

// MarkWorking is markWorking, for the tests outside the package.
var MarkWorking = markWorking
