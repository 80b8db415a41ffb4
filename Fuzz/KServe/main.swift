// A KServe v2 binary reply as the client receives it: the body through the bounded reply sink in
// chunks (with a limit), the Inference-Header-Content-Length header or none, some outputs asked for
// in shared memory; then parsed. Every tensor it returns must lie inside the body.
import FuzzSupport
@testable import MatteEngine

fuzzMain { data in
    var reader = FuzzReader(data)
    let flags = reader.byte()
    let announced = reader.uint16()
    let chunk = max(1, reader.uint16())
    let limit = flags & 4 != 0 ? reader.uint16() : 1 << 20
    let body = reader.rest()
    let sink = ReplySink(limit: limit)
    if flags & 1 != 0 {
        var line = Array("Inference-Header-Content-Length: \(announced)\r\n".utf8CString.dropLast())
        _ = line.withUnsafeMutableBufferPointer { sink.header($0.baseAddress, $0.count) }
    }
    var offset = 0
    while offset < body.count {
        let count = min(chunk, body.count - offset)
        var part = Array(body[offset..<(offset + count)]).map { CChar(bitPattern: $0) }
        let taken = part.withUnsafeMutableBufferPointer { sink.append($0.baseAddress, count) }
        if taken != count { break }  // (over the limit: libcurl would stop here)
        offset += count
    }
    precondition(sink.reply.body.count <= limit)
    var reply = sink.reply
    reply.status = 200
    let shared: Set<String> = flags & 2 != 0 ? ["ALPHA", "UNCERTAINTY"] : []
    guard let tensors = try? KServe.parseReply(reply, sharedMemoryOutputs: shared) else { return }
    for tensor in tensors.values {
        if let bytes = tensor.bytes {
            precondition(bytes.lowerBound >= 0 && bytes.upperBound <= reply.body.count)
            precondition(bytes.count == tensor.count * (KServe.elementSize(tensor.datatype) ?? 0))
        }
    }
}
