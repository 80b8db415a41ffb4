// The model-placement property string: parsed; what parses describes itself as a string that parses
// back to the same placement.
import FuzzSupport
@testable import MatteEngine

fuzzMain { data in
    let text = String(decoding: data, as: UTF8.self)
    guard let placement = try? ModelPlacement.parse(text) else { return }
    let again = try? ModelPlacement.parse(ModelPlacement.describe(placement))
    precondition(again == placement, "model-placement \(text) does not round-trip")
}
