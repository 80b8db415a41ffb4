import MattePixelTypes
import Foundation

/// The separable resampling used on both sides of the models: the frame down to the
/// model's input, the model's alpha up to the frame. Downscaling averages the covered source area
/// (like OpenCV's INTER_AREA, no aliasing on 1080p → 256); upscaling is bilinear on pixel centres.

/// For one axis: for each output index, `tapCount` (source index, weight) pairs. Owned buffers,
/// built once per size, so the per-frame loops read them without borrowing an array each time.
final class AxisTaps {
    let outputCount: Int
    let tapCount: Int
    let index: UnsafeMutableBufferPointer<Int>
    let weight: UnsafeMutableBufferPointer<Float>
    /// `weight` in 8.8 fixed point, each output's summing to exactly 256 (see `fixedPoint`).
    let fixedWeight: UnsafeMutableBufferPointer<UInt16>

    init(source: Int, output: Int) {
        precondition(source > 0 && output > 0)
        outputCount = output
        let perOutput = source > output ? AxisTaps.areaTaps(source: source, output: output)
                                        : AxisTaps.bilinearTaps(source: source, output: output)
        let tapCount = perOutput.map(\.count).max() ?? 1
        self.tapCount = tapCount
        index = .allocate(capacity: output * tapCount)
        weight = .allocate(capacity: output * tapCount)
        fixedWeight = .allocate(capacity: output * tapCount)
        for (o, taps) in perOutput.enumerated() {
            let row = o * tapCount
            for t in 0..<tapCount {
                // Padding taps repeat a valid index with weight 0.
                let tap = t < taps.count ? taps[t] : (taps.last?.0 ?? 0, 0)
                index[row + t] = tap.0
                weight[row + t] = tap.1
            }
            let fixed = AxisTaps.fixedPoint(taps.map(\.1))
            for t in 0..<tapCount { fixedWeight[row + t] = t < fixed.count ? fixed[t] : 0 }
        }
    }

    deinit {
        index.deallocate()
        weight.deallocate()
        fixedWeight.deallocate()
    }

    /// Area: output o covers [o·scale, (o+1)·scale) of the source.
    private static func areaTaps(source: Int, output: Int) -> [[(Int, Float)]] {
        let scale = Double(source) / Double(output)
        return (0..<output).map { o in
            let start = Double(o) * scale
            let end = min(Double(o + 1) * scale, Double(source))
            var taps: [(Int, Float)] = []
            var s = Int(start.rounded(.down))
            while Double(s) < end - 1e-9 {
                let covered = min(end, Double(s + 1)) - max(start, Double(s))
                if covered > 1e-9 { taps.append((min(s, source - 1), Float(covered / (end - start)))) }
                s += 1
            }
            return taps
        }
    }

    /// Bilinear with half-pixel centres, edges clamped.
    private static func bilinearTaps(source: Int, output: Int) -> [[(Int, Float)]] {
        let scale = Double(source) / Double(output)
        return (0..<output).map { o in
            let x = (Double(o) + 0.5) * scale - 0.5
            let x0 = Int(x.rounded(.down))
            let fraction = Float(x - Double(x0))
            return [(min(max(x0, 0), source - 1), 1 - fraction), (min(max(x0 + 1, 0), source - 1), fraction)]
        }
    }

    /// Weights (non-negative, summing to 1) in 8.8 fixed point summing to exactly 256, so a byte times
    /// a weight, summed over the taps, stays within 16 bits (255·256 < 65536). Largest remainder:
    /// every weight is rounded down, and the units still missing go to the largest fractions. Rounding
    /// each weight to nearest instead can overshoot 256 by more than the largest weight when there are
    /// many small taps (a 30× downscale), and no single correction then keeps every weight ≥ 0.
    static func fixedPoint(_ weights: [Float]) -> [UInt16] {
        guard !weights.isEmpty else { return [] }
        let total = weights.reduce(0) { $0 + Double(max($1, 0)) }
        let scaled = weights.map { total > 0 ? Double(max($0, 0)) / total * 256 : 256 / Double(weights.count) }
        var fixed = scaled.map { Int($0.rounded(.down)) }
        let missing = 256 - fixed.reduce(0, +)  // 0 ≤ missing < count: each floor lost less than 1
        let byFraction = scaled.indices.sorted { scaled[$0] - Double(fixed[$0]) > scaled[$1] - Double(fixed[$1]) }
        for i in 0..<missing { fixed[byFraction[i % byFraction.count]] += 1 }
        return fixed.map { UInt16($0) }
    }
}

/// Which source row each slot of a small ring of widened rows holds. An output row's source rows are
/// consecutive, so with vTaps + 1 slots indexed by row modulo the slot count none that the same
/// output row still needs is evicted, and the next output rows find theirs still widened.
struct HeldRows {
    private var held: [Int]
    /// Whether the last `slot(for:)` handed out a slot that must be filled with its row first.
    private(set) var needsFill = false

    init(slots: Int) { held = [Int](repeating: -1, count: slots) }

    mutating func slot(for row: Int) -> Int {
        let slot = row % held.count
        needsFill = held[slot] != row
        held[slot] = row
        return slot
    }
}

/// Resamples between two fixed sizes; scratch rows are allocated once and reused per frame.
public final class ResamplerKernel: Resampling {
    public let sourceWidth: Int, sourceHeight: Int
    public let targetWidth: Int, targetHeight: Int
    let horizontal: AxisTaps
    let vertical: AxisTaps
    private var byteRows: [SIMD16<UInt16>] = []
    private var expanded: [Float] = []
    private var byteRing: [UInt8] = []
    private var widenedRow: [Float] = []

    public init(sourceWidth: Int, sourceHeight: Int, targetWidth: Int, targetHeight: Int) {
        self.sourceWidth = sourceWidth
        self.sourceHeight = sourceHeight
        self.targetWidth = targetWidth
        self.targetHeight = targetHeight
        horizontal = AxisTaps(source: sourceWidth, output: targetWidth)
        vertical = AxisTaps(source: sourceHeight, output: targetHeight)
    }

    /// BGRA bytes → three float planes (R, G, B order, each `planeStride` apart, rows `rowStride`
    /// apart, element step `pixelStep`), values scaled by `scale` (1/255 gives [0, 1]).
    /// NCHW: pixelStep 1, planeStride W·H. NHWC: pixelStep 3, planeStride 1.
    /// The vertical pass runs first, on the bytes themselves: sixteen at a time in 16-bit fixed point,
    /// so each source row is read once per tap at a few instructions per 4 pixels (this pass touches
    /// every source byte; at 1080p it is most of the element's own time). The horizontal pass then
    /// reads the short accumulated row as floats.
    public func bgraToRGB(_ image: BGRAImage, into destination: UnsafeMutablePointer<Float>,
                          pixelStep: Int, rowStride: Int, planeStride: Int, scale: Float = 1.0 / 255.0) {
        precondition(image.width == sourceWidth && image.height == sourceHeight)
        let rowBytes = sourceWidth * 4
        let chunks = (rowBytes + 15) / 16, fullChunks = rowBytes / 16
        let hTaps = horizontal.tapCount, vTaps = vertical.tapCount
        let outputScale = scale / 256
        let slices = Slices.count(work: sourceWidth * sourceHeight)
        if byteRows.count != chunks * slices { byteRows = [SIMD16<UInt16>](repeating: .zero, count: chunks * slices) }
        let hIndex = horizontal.index, hWeight = horizontal.weight
        let vIndex = vertical.index, vWeight = vertical.fixedWeight
        byteRows.withUnsafeMutableBufferPointer { accumulators in
            Slices.forEach(of: targetHeight, slices: slices) { rows, slice in
                let acc = accumulators.baseAddress! + slice * chunks
                for y in rows {
                    acc.update(repeating: .zero, count: chunks)
                    for t in 0..<vTaps {
                        let w = vWeight[y * vTaps + t]
                        if w == 0 { continue }
                        let weight = SIMD16<UInt16>(repeating: w)
                        let source = UnsafeRawPointer(image.base + vIndex[y * vTaps + t] * image.stride)
                        for c in 0..<fullChunks {
                            let bytes = source.loadUnaligned(fromByteOffset: 16 * c, as: SIMD16<UInt8>.self)
                            acc[c] &+= SIMD16<UInt16>(truncatingIfNeeded: bytes) &* weight
                        }
                        if fullChunks < chunks {  // a row not a multiple of 4 pixels: the last few bytes
                            var tail = SIMD16<UInt8>.zero
                            for i in 0..<(rowBytes - 16 * fullChunks) {
                                tail[i] = source.load(fromByteOffset: 16 * fullChunks + i, as: UInt8.self)
                            }
                            acc[fullChunks] &+= SIMD16<UInt16>(truncatingIfNeeded: tail) &* weight
                        }
                    }
                    let pixels = UnsafeRawPointer(acc)
                    let out = destination + y * rowStride
                    var tap = 0  // wrapping arithmetic: the indices were built in range, and checks cost here
                    for x in 0..<targetWidth {
                        var sum = SIMD4<Float>.zero
                        for _ in 0..<hTaps {
                            let pixel = pixels.load(fromByteOffset: hIndex[tap] &<< 3, as: SIMD4<UInt16>.self)
                            sum += hWeight[tap] * SIMD4<Float>(SIMD4<Int32>(truncatingIfNeeded: pixel))
                            tap &+= 1
                        }
                        sum *= outputScale
                        let o = out + x &* pixelStep
                        o[0] = sum[2]               // R
                        o[planeStride] = sum[1]     // G
                        o[2 * planeStride] = sum[0] // B
                    }
                }
            }
        }
    }

    /// A float plane (`sourceStride` floats per row) → another float plane.
    public func resample(_ source: UnsafePointer<Float>, sourceStride: Int,
                         into destination: UnsafeMutablePointer<Float>, destinationStride: Int) {
        resampleRows(rowOf: { source + $0 * sourceStride }) { y, values in
            (destination + y * destinationStride).update(from: values, count: targetWidth)
        }
    }

    /// A float plane of values in [0, 1] → an 8-bit plane (rounded, clamped), within about a level of
    /// the exact interpolation (1.5 at worst, between neighbours of maximal contrast). Each source row
    /// is widened once and stored as bytes; the vertical pass then blends byte rows sixteen at a time
    /// in 8.8 fixed point. The output is bytes anyway, and this pass writes every output pixel (2 M
    /// at 1080p): in floats it took four times the instructions.
    public func resample(_ source: UnsafePointer<Float>, sourceStride: Int, into destination: GrayImage) {
        precondition(destination.width == targetWidth && destination.height == targetHeight)
        let width = targetWidth, chunks = targetWidth / 16
        let hTaps = horizontal.tapCount, vTaps = vertical.tapCount
        let slots = vTaps + 1  // see HeldRows
        let rowBytes = (width + 15) / 16 * 16
        let slices = Slices.count(work: targetWidth * targetHeight)
        if byteRing.count != slots * rowBytes * slices { byteRing = [UInt8](repeating: 0, count: slots * rowBytes * slices) }
        if widenedRow.count != width * slices { widenedRow = [Float](repeating: 0, count: width * slices) }
        let hIndex = horizontal.index, hWeight = horizontal.weight
        let vIndex = vertical.index, vWeight = vertical.fixedWeight
        byteRing.withUnsafeMutableBufferPointer { ringBuffer in
        widenedRow.withUnsafeMutableBufferPointer { scratchBuffer in
            Slices.forEach(of: targetHeight, slices: slices) { targetRows, slice in
                let ring = ringBuffer.baseAddress! + slice * slots * rowBytes
                let widened = scratchBuffer.baseAddress! + slice * width
                var held = HeldRows(slots: slots)
                var taps = [UnsafePointer<UInt8>?](repeating: nil, count: vTaps)
                for y in targetRows {
                    for t in 0..<vTaps {
                        let sourceRow = vIndex[y * vTaps + t]
                        let bytes = ring + held.slot(for: sourceRow) * rowBytes
                        if held.needsFill {
                            ResamplerKernel.widen(source + sourceRow * sourceStride, into: widened, count: width,
                                            index: hIndex.baseAddress!, weight: hWeight.baseAddress!, taps: hTaps)
                            ResamplerKernel.quantize(widened, into: bytes, count: width)
                        }
                        taps[t] = UnsafePointer(bytes)
                    }
                    let out = destination.base + y * destination.stride
                    for chunk in 0..<chunks {
                        // Where every tap row holds the same sixteen bytes (most of a matte: all 0 or all
                        // 255), the blend is those bytes: the weights sum to exactly 256, and
                        // (256·v + 128) >> 8 = v.
                        let first = UnsafeRawPointer(taps[0]!) + 16 * chunk
                        let low = first.loadUnaligned(as: UInt64.self), high = first.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
                        var same = true
                        for t in 1..<vTaps where same {
                            let row = UnsafeRawPointer(taps[t]!) + 16 * chunk
                            same = row.loadUnaligned(as: UInt64.self) == low && row.loadUnaligned(fromByteOffset: 8, as: UInt64.self) == high
                        }
                        if same {
                            let target = UnsafeMutableRawPointer(out + 16 * chunk)
                            target.storeBytes(of: low, as: UInt64.self)
                            target.storeBytes(of: high, toByteOffset: 8, as: UInt64.self)
                            continue
                        }
                        var sum = SIMD16<UInt16>(repeating: 128)  // rounds the >> 8 below to nearest
                        for t in 0..<vTaps {
                            let row = UnsafeRawPointer(taps[t]!).loadUnaligned(fromByteOffset: 16 * chunk, as: SIMD16<UInt8>.self)
                            sum &+= SIMD16<UInt16>(truncatingIfNeeded: row) &* SIMD16(repeating: vWeight[y * vTaps + t])
                        }
                        UnsafeMutableRawPointer(out + 16 * chunk).storeBytes(of: SIMD16<UInt8>(truncatingIfNeeded: sum &>> 8),
                                                                             as: SIMD16<UInt8>.self)
                    }
                    for x in (16 * chunks)..<width {
                        var sum = 128
                        for t in 0..<vTaps { sum += Int(taps[t]![x]) * Int(vWeight[y * vTaps + t]) }
                        out[x] = UInt8(sum >> 8)
                    }
                }
            }
        }}
    }

    /// One row through the horizontal taps (wrapping arithmetic: the taps were built in range, and
    /// checks cost here).
    @inline(__always)
    private static func widen(_ source: UnsafePointer<Float>, into out: UnsafeMutablePointer<Float>, count: Int,
                              index: UnsafePointer<Int>, weight: UnsafePointer<Float>, taps: Int) {
        var tap = 0
        for x in 0..<count {
            var value: Float = 0
            for _ in 0..<taps {
                value += weight[tap] * source[index[tap]]
                tap &+= 1
            }
            out[x] = value
        }
    }

    /// Values in [0, 1] → bytes, eight at a time, then the tail.
    @inline(__always)
    private static func quantize(_ values: UnsafePointer<Float>, into out: UnsafeMutablePointer<UInt8>, count: Int) {
        let raw = UnsafeRawPointer(values)
        for block in 0..<(count / 8) {
            let bytes = quantize(raw.loadUnaligned(fromByteOffset: 32 * block, as: SIMD8<Float>.self))
            UnsafeMutableRawPointer(out + 8 * block).storeBytes(of: bytes, as: SIMD8<UInt8>.self)
        }
        for x in (count / 8 * 8)..<count { out[x] = UInt8(min(max(values[x] * 255 + 0.5, 0), 255)) }
    }

    /// Eight values in [0, 1] → bytes, exactly as `UInt8(min(max(v * 255 + 0.5, 0), 255))`. Built from
    /// float adds, compares and bit masks: the SIMD float → integer conversions in the standard library
    /// run element by element (fifty times slower at 1080p).
    @inline(__always)
    static func quantize(_ values: SIMD8<Float>) -> SIMD8<UInt8> {
        let magic = SIMD8<Float>(repeating: 8_388_608)  // 2^23: y + 2^23 holds round(y) in its low mantissa bits
        var y = values * 255 + 0.5
        y = y.replacing(with: 0, where: y .< 0).replacing(with: 255, where: y .> 255)
        let shifted = y + magic
        var integer = unsafeBitCast(shifted, to: SIMD8<Int32>.self) & 0x1FF
        integer &-= unsafeBitCast((shifted - magic) .> y, to: SIMD8<Int32>.self) & 1  // rounded up: floor instead
        return SIMD8<UInt8>(truncatingIfNeeded: integer)
    }

    /// An 8-bit plane → a float plane in [0, 1].
    public func resample(_ source: GrayView, into destination: UnsafeMutablePointer<Float>, destinationStride: Int) {
        var converted = [Float](repeating: 0, count: sourceWidth * sourceHeight)
        for y in 0..<sourceHeight {
            for x in 0..<sourceWidth {
                converted[y * sourceWidth + x] = Float(source.base[y * source.stride + x]) / 255
            }
        }
        converted.withUnsafeBufferPointer { plane in
            resample(plane.baseAddress!, sourceStride: sourceWidth, into: destination, destinationStride: destinationStride)
        }
    }

    /// For each output row: the source rows it needs, each widened by the horizontal pass once (kept in
    /// a small per-slice ring, so a widened row is reused by the next output rows while it is still
    /// in cache), then one weighted sum of those whole rows, eight floats at a time.
    @inline(__always)
    private func resampleRows(rowOf: (Int) -> UnsafePointer<Float>, storeRow: (Int, UnsafePointer<Float>) -> Void) {
        let width = targetWidth, blocks = targetWidth / 8
        let hTaps = horizontal.tapCount, vTaps = vertical.tapCount
        let slots = vTaps + 1  // see HeldRows
        let slices = Slices.count(work: targetWidth * targetHeight)
        let perSlice = (slots + 1) * width  // the ring, then the output row
        if expanded.count != perSlice * slices { expanded = [Float](repeating: 0, count: perSlice * slices) }
        let hIndex = horizontal.index, hWeight = horizontal.weight
        let vIndex = vertical.index, vWeight = vertical.weight
        expanded.withUnsafeMutableBufferPointer { buffer in
            Slices.forEach(of: targetHeight, slices: slices) { targetRows, slice in
                let ring = buffer.baseAddress! + slice * perSlice
                let acc = ring + slots * width
                var held = HeldRows(slots: slots)
                var taps = [UnsafeRawPointer?](repeating: nil, count: vTaps)
                for y in targetRows {
                    for t in 0..<vTaps {
                        let sourceRow = vIndex[y * vTaps + t]
                        let widened = ring + held.slot(for: sourceRow) * width
                        if held.needsFill {
                            ResamplerKernel.widen(rowOf(sourceRow), into: widened, count: width,
                                            index: hIndex.baseAddress!, weight: hWeight.baseAddress!, taps: hTaps)
                        }
                        taps[t] = UnsafeRawPointer(widened)
                    }
                    let out = UnsafeMutableRawPointer(acc)
                    for block in 0..<blocks {
                        var sum = SIMD8<Float>.zero
                        for t in 0..<vTaps {
                            sum += vWeight[y * vTaps + t] * taps[t]!.loadUnaligned(fromByteOffset: 32 * block, as: SIMD8<Float>.self)
                        }
                        out.storeBytes(of: sum, toByteOffset: 32 * block, as: SIMD8<Float>.self)
                    }
                    for x in (8 * blocks)..<width {
                        var sum: Float = 0
                        for t in 0..<vTaps { sum += vWeight[y * vTaps + t] * taps[t]!.load(fromByteOffset: 4 * x, as: Float.self) }
                        acc[x] = sum
                    }
                    storeRow(y, acc)
                }
            }
        }
    }
}
