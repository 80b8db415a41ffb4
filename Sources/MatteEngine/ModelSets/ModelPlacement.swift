import Foundation

/// Where one of MatAnyone2's models runs when it is not where the rest of the set runs
/// (`model-placement`, e.g. `encoder=bf16,memframe=cpu`). The set's own choice stands for every model
/// not named: the bf16 set's `bf16.models` on OpenVINO in bf16, the others on the run's provider.
public enum ModelPlacement: String, CaseIterable, Sendable {
    /// fp32 on the provider the run uses (on a bf16 set: a bf16 model back to fp32, on the CPU provider).
    case fp32
    /// OpenVINO on the CPU with bf16 arithmetic (CPUs that compute bf16).
    case bf16
    /// ONNX Runtime's own CPU provider, fp32.
    case cpu
    /// OpenVINO on the CPU, fp32.
    case openvino
    /// NVIDIA GPUs, fp32 (the GPU build of ONNX Runtime).
    case cuda, tensorrt

    /// The provider it names (nil: the run's).
    var provider: ExecutionProvider? {
        switch self {
        case .fp32: return nil
        case .bf16, .openvino: return .openvino
        case .cpu: return .cpu
        case .cuda: return .cuda
        case .tensorrt: return .tensorrt
        }
    }

    /// Runs through ONNX Runtime's OpenVINO build.
    var needsOpenVino: Bool { provider == .openvino }
    var onGpu: Bool { provider?.isGpu ?? false }

    /// MatAnyone2's models, as `model-placement` names them.
    public static var modelNames: [String] { MatAnyone2Core.modelNames }

    /// `name=placement` pairs separated by commas (in any case, spaces around either ignored; empty: none).
    /// Every fault is a settings error that names what is accepted.
    public static func parse(_ text: String) throws -> [String: ModelPlacement] {
        var placement: [String: ModelPlacement] = [:]
        let names = modelNames.joined(separator: ", ")
        let values = allCases.map(\.rawValue).joined(separator: ", ")
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            let pair = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                .map { $0.trimmingCharacters(in: .whitespacesAndNewlines).lowercased() }
            if pair.count == 1, pair[0].isEmpty, text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty { break }
            guard pair.count == 2, !pair[0].isEmpty, !pair[1].isEmpty else {
                throw EngineError.badSettings(detail: "model-placement \"\(text)\": '\(item)' is not MODEL=PLACEMENT "
                                              + "(e.g. encoder=bf16,memframe=cpu; models: \(names); placements: \(values))")
            }
            guard modelNames.contains(pair[0]) else {
                throw EngineError.badSettings(detail: "model-placement names '\(pair[0])', which is not one of MatAnyone2's "
                                              + "models: \(names)")
            }
            guard let chosen = ModelPlacement(rawValue: pair[1]) else {
                throw EngineError.badSettings(detail: "model-placement puts \(pair[0]) on '\(pair[1])', which is not a "
                                              + "placement: \(values)")
            }
            guard placement[pair[0]] == nil || placement[pair[0]] == chosen else {
                throw EngineError.badSettings(detail: "model-placement places \(pair[0]) twice, differently")
            }
            placement[pair[0]] = chosen
        }
        return placement
    }

    /// `parse`'s form: the names in the set's order.
    public static func describe(_ placement: [String: ModelPlacement]) -> String {
        modelNames.compactMap { name in placement[name].map { "\(name)=\($0.rawValue)" } }.joined(separator: ",")
    }
}
