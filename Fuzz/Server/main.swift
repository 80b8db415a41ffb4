// The inference server's other replies: header lines (through the reply sink), then the body read as
// model metadata, statistics and an error reply.
import FuzzSupport
@testable import MatteEngine

fuzzMain { data in
    let bytes = Array(data)
    let split = bytes.firstIndex(of: 0) ?? bytes.count
    let sink = ReplySink(limit: 1 << 20)
    for line in bytes[..<split].split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
        var text = line.map { CChar(bitPattern: $0) }
        _ = text.withUnsafeMutableBufferPointer { sink.header($0.baseAddress, $0.count) }
    }
    let body = split < bytes.count ? Array(bytes[(split + 1)...]) : []
    _ = StepClient.servesStepModel(metadata: body)
    if let (count, ns) = StepClient.queueStatistics(body) { precondition(count >= 0 && ns >= 0) }
    var reply = sink.reply
    reply.status = 500
    reply.body = body
    _ = KServe.errorMessage(reply)
}
