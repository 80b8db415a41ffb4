// The inference-server URL property: parsed; the base it gives parses again to itself.
import FuzzSupport
@testable import MatteEngine

fuzzMain { data in
    let text = String(decoding: data, as: UTF8.self)
    guard let (base, host) = try? StepClient.parse(text) else { return }
    precondition(!host.isEmpty)
    guard let again = try? StepClient.parse(base) else { preconditionFailure("the base \(base) of \(text) does not parse") }
    precondition(again.base == base, "\(text): \(base) then \(again.base)")
}
