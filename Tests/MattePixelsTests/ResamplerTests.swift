import Testing
import MattePixels
@testable import PixelKernels

/// Pure resampling logic: no runtime, no models.
struct ResamplerTests {
    private func bgra(width: Int, height: Int, stride: Int? = nil, pixel: (Int, Int) -> (UInt8, UInt8, UInt8)) -> [UInt8] {
        let rowBytes = stride ?? width * 4
        var data = [UInt8](repeating: 77, count: rowBytes * height)
        for y in 0..<height {
            for x in 0..<width {
                let (r, g, b) = pixel(x, y)
                data[y * rowBytes + x * 4 + 0] = b
                data[y * rowBytes + x * 4 + 1] = g
                data[y * rowBytes + x * 4 + 2] = r
                data[y * rowBytes + x * 4 + 3] = 255
            }
        }
        return data
    }

    @Test func areaDownscaleAveragesBlocksAndKeepsChannelOrder() {
        // 4×2 → 2×1: each output pixel averages a 2×2 block.
        let data = bgra(width: 4, height: 2) { x, y in (UInt8(x * 10 + y * 100), 50, 200) }
        var out = [Float](repeating: -1, count: 2 * 3)
        let resampler = Resampler(sourceWidth: 4, sourceHeight: 2, targetWidth: 2, targetHeight: 1)
        data.withUnsafeBufferPointer { pixels in
            let image = BGRAImage(base: pixels.baseAddress!, width: 4, height: 2, stride: 16)
            resampler.bgraToRGB(image, into: &out, pixelStep: 1, rowStride: 2, planeStride: 2, scale: 1)
        }
        // Planar RGB: R plane, G plane, B plane.
        #expect(abs(out[0] - 55) < 1e-4)   // (0+10+100+110)/4
        #expect(abs(out[1] - 75) < 1e-4)   // (20+30+120+130)/4
        #expect(out[2] == 50 && out[3] == 50)
        #expect(out[4] == 200 && out[5] == 200)
    }

    @Test func rowStridePaddingIsIgnored() {
        let tight = bgra(width: 5, height: 3) { x, y in (UInt8(x * 40), UInt8(y * 80), 9) }
        let padded = bgra(width: 5, height: 3, stride: 5 * 4 + 12) { x, y in (UInt8(x * 40), UInt8(y * 80), 9) }
        let resampler = Resampler(sourceWidth: 5, sourceHeight: 3, targetWidth: 3, targetHeight: 2)
        var a = [Float](repeating: 0, count: 18), b = [Float](repeating: 0, count: 18)
        tight.withUnsafeBufferPointer {
            resampler.bgraToRGB(BGRAImage(base: $0.baseAddress!, width: 5, height: 3, stride: 20), into: &a,
                                pixelStep: 3, rowStride: 9, planeStride: 1)
        }
        padded.withUnsafeBufferPointer {
            resampler.bgraToRGB(BGRAImage(base: $0.baseAddress!, width: 5, height: 3, stride: 32), into: &b,
                                pixelStep: 3, rowStride: 9, planeStride: 1)
        }
        #expect(a == b)
    }

    @Test func bilinearUpscaleInterpolatesAndClampsEdges() {
        // 2×1 plane [0, 1] → 4×1: pixel centres at 0.25 and 0.75 of the way.
        let source: [Float] = [0, 1]
        var out = [Float](repeating: -1, count: 4)
        let resampler = Resampler(sourceWidth: 2, sourceHeight: 1, targetWidth: 4, targetHeight: 1)
        source.withUnsafeBufferPointer { resampler.resample($0.baseAddress!, sourceStride: 2, into: &out, destinationStride: 4) }
        #expect(out.map { ($0 * 100).rounded() / 100 } == [0, 0.25, 0.75, 1])
    }

    @Test func floatToGrayRoundsAndClamps() {
        let source: [Float] = [-0.5, 0.5, 1.5, 0.2]
        var bytes = [UInt8](repeating: 0, count: 4)
        let resampler = Resampler(sourceWidth: 4, sourceHeight: 1, targetWidth: 4, targetHeight: 1)
        source.withUnsafeBufferPointer { plane in
            bytes.withUnsafeMutableBufferPointer { out in
                resampler.resample(plane.baseAddress!, sourceStride: 4,
                                   into: GrayImage(base: out.baseAddress!, width: 4, height: 1, stride: 4))
            }
        }
        #expect(bytes == [0, 128, 255, 51])
    }

    @Test func vectorAndScalarRoundingAgree() {
        // 19 wide: two 8-lane blocks and a scalar tail.
        let source: [Float] = (0..<19).map { Float($0) / 9 - 0.5 }
        var bytes = [UInt8](repeating: 0, count: 19)
        let resampler = Resampler(sourceWidth: 19, sourceHeight: 1, targetWidth: 19, targetHeight: 1)
        source.withUnsafeBufferPointer { plane in
            bytes.withUnsafeMutableBufferPointer { out in
                resampler.resample(plane.baseAddress!, sourceStride: 19,
                                   into: GrayImage(base: out.baseAddress!, width: 19, height: 1, stride: 19))
            }
        }
        #expect(bytes == source.map { UInt8(min(max($0 * 255 + 0.5, 0), 255)) })
    }

    @Test func constantImageStaysConstantAtAnyRatio() {
        for (sw, sh, tw, th) in [(17, 9, 256, 256), (1920, 1080, 256, 256), (3, 5, 7, 2), (1, 1, 4, 4)] {
            let data = bgra(width: sw, height: sh) { _, _ in (100, 150, 200) }
            var out = [Float](repeating: 0, count: tw * th * 3)
            let resampler = Resampler(sourceWidth: sw, sourceHeight: sh, targetWidth: tw, targetHeight: th)
            data.withUnsafeBufferPointer {
                resampler.bgraToRGB(BGRAImage(base: $0.baseAddress!, width: sw, height: sh, stride: sw * 4), into: &out,
                                    pixelStep: 3, rowStride: tw * 3, planeStride: 1, scale: 1)
            }
            for index in stride(from: 0, to: out.count, by: 3) {
                #expect(abs(out[index] - 100) < 1e-2 && abs(out[index + 1] - 150) < 1e-2 && abs(out[index + 2] - 200) < 1e-2)
            }
        }
    }

    @Test func areaTapsCoverTheSourceExactlyOnce() {
        for (source, output) in [(1920, 256), (1080, 256), (10, 3), (7, 7)] {
            let taps = AxisTaps(source: source, output: output)
            var coverage = [Float](repeating: 0, count: source)
            for o in 0..<output {
                for t in 0..<taps.tapCount {
                    coverage[taps.index[o * taps.tapCount + t]] += taps.weight[o * taps.tapCount + t]
                }
            }
            // Every source pixel contributes output/source in total.
            let expected = Float(output) / Float(source)
            #expect(coverage.allSatisfy { abs($0 - expected) < 1e-3 })
        }
    }
    /// Straight from the taps in double precision: what the fast paths must reproduce.
    private func referenceResample(_ plane: [Double], width: Int, height: Int, toWidth: Int, toHeight: Int) -> [Double] {
        let horizontal = AxisTaps(source: width, output: toWidth), vertical = AxisTaps(source: height, output: toHeight)
        var out = [Double](repeating: 0, count: toWidth * toHeight)
        for y in 0..<toHeight {
            for x in 0..<toWidth {
                var sum = 0.0
                for v in 0..<vertical.tapCount {
                    for h in 0..<horizontal.tapCount {
                        sum += Double(vertical.weight[y * vertical.tapCount + v]) * Double(horizontal.weight[x * horizontal.tapCount + h])
                            * plane[vertical.index[y * vertical.tapCount + v] * width + horizontal.index[x * horizontal.tapCount + h]]
                    }
                }
                out[y * toWidth + x] = sum
            }
        }
        return out
    }

    @Test func fixedPointDownscaleStaysWithinALevelOfExactArea() {
        // Odd widths put the last bytes of each row in the partial 16-byte chunk; 1920×1080 → 512×288 is
        // the working size of a 1080p frame.
        for (sw, sh, tw, th) in [(1920, 1080, 512, 288), (37, 23, 10, 7), (5, 9, 2, 4), (131, 77, 131, 77)] {
            var state: UInt32 = 12345
            let data = bgra(width: sw, height: sh) { _, _ in
                state = state &* 1_664_525 &+ 1_013_904_223
                return (UInt8(truncatingIfNeeded: state >> 24), UInt8(truncatingIfNeeded: state >> 16), UInt8(truncatingIfNeeded: state >> 8))
            }
            var out = [Float](repeating: -1, count: tw * th * 3)
            let resampler = Resampler(sourceWidth: sw, sourceHeight: sh, targetWidth: tw, targetHeight: th)
            data.withUnsafeBufferPointer {
                resampler.bgraToRGB(BGRAImage(base: $0.baseAddress!, width: sw, height: sh, stride: sw * 4), into: &out,
                                    pixelStep: 1, rowStride: tw, planeStride: tw * th, scale: 1)
            }
            var worst = 0.0
            for (plane, byte) in [(0, 2), (1, 1), (2, 0)] {  // R, G, B planes from BGRA bytes
                let source = (0..<(sw * sh)).map { Double(data[$0 * 4 + byte]) }
                let expected = referenceResample(source, width: sw, height: sh, toWidth: tw, toHeight: th)
                for index in expected.indices {
                    worst = max(worst, abs(Double(out[plane * tw * th + index]) - expected[index]))
                }
            }
            #expect(worst <= 1.0, "\(sw)×\(sh) → \(tw)×\(th): off by \(worst) levels")
        }
    }

    @Test func bilinearUpscaleToGrayMatchesExactInterpolation() {
        // 512×288 → 1920×1080 (sixteen-byte chunks, rows cut into slices) and an odd size with a scalar tail.
        for (sw, sh, tw, th) in [(512, 288, 1920, 1080), (7, 5, 29, 19)] {
            let source = (0..<(sw * sh)).map { Float(($0 * 7919) % 1000) / 999 }
            var bytes = [UInt8](repeating: 0, count: tw * th)
            let resampler = Resampler(sourceWidth: sw, sourceHeight: sh, targetWidth: tw, targetHeight: th)
            source.withUnsafeBufferPointer { plane in
                bytes.withUnsafeMutableBufferPointer { out in
                    resampler.resample(plane.baseAddress!, sourceStride: sw,
                                       into: GrayImage(base: out.baseAddress!, width: tw, height: th, stride: tw))
                }
            }
            let expected = referenceResample(source.map(Double.init), width: sw, height: sh, toWidth: tw, toHeight: th)
            var worst = 0.0, total = 0.0
            for index in expected.indices {
                let error = abs(Double(bytes[index]) - expected[index] * 255)
                worst = max(worst, error)
                total += error
            }
            // Byte rows and 8.8 weights: half a level from each rounding at most; this source has
            // maximal contrast between neighbours, the worst case for the weights' rounding.
            #expect(worst <= 1.5, "\(sw)×\(sh) → \(tw)×\(th): off by \(worst) levels")
            // Rounding the exact value alone averages a quarter level.
            #expect(total / Double(expected.count) <= 0.4, "\(sw)×\(sh) → \(tw)×\(th): mean error \(total / Double(expected.count))")
        }
    }

    @Test func vectorQuantizeMatchesScalarRoundingEverywhere() {
        // Every tie (k + 0.5)/255, values around them, and out-of-range values on both sides.
        var values: [Float] = []
        for k in -3...258 {
            let tie = (Float(k) - 0.5) / 255
            values += [tie, tie.nextDown, tie.nextUp, Float(k) / 255]
        }
        values += [-1e9, 1e9, -0.0, .infinity, -.infinity]
        while values.count % 8 != 0 { values.append(0.3) }
        for start in stride(from: 0, to: values.count, by: 8) {
            let block = SIMD8<Float>(values[start..<start + 8])
            let bytes = ResamplerKernel.quantize(block)
            for lane in 0..<8 {
                #expect(bytes[lane] == UInt8(min(max(block[lane] * 255 + 0.5, 0), 255)), "value \(block[lane])")
            }
        }
    }

    // MARK: Weights and extreme ratios (hostile sizes: each must end well, never trap)

    /// Every ratio, not a few cases: the fixed-point weights of each output sum to exactly 256 with
    /// none negative (rounding each weight to nearest once overshot at 24–30× and trapped).
    @Test func fixedPointWeightsSumTo256AtEveryRatio() {
        var sizes = Array(1...200)
        sizes += [255, 256, 257, 288, 511, 1080, 1919, 1920, 4320, 7680]
        for source in sizes {
            for output in [1, 2, 3, 5, 7, 16, 17, 31, 32, 100, 199, 288, 512] {
                let taps = AxisTaps(source: source, output: output)
                for o in 0..<output {
                    var total = 0
                    var floatTotal: Float = 0
                    for t in 0..<taps.tapCount {
                        total += Int(taps.fixedWeight[o * taps.tapCount + t])
                        floatTotal += taps.weight[o * taps.tapCount + t]
                        let index = taps.index[o * taps.tapCount + t]
                        #expect(index >= 0 && index < source)
                    }
                    #expect(total == 256, "\(source) → \(output), output \(o): fixed weights sum to \(total)")
                    #expect(abs(floatTotal - 1) < 5e-4)
                }
            }
        }
    }

    @Test func largestRemainderKeepsWeightsNonNegative() {
        // 30 taps of 1/30: rounding each to nearest gives 9 × 30 = 270 > 256 + 9.
        let fixed = AxisTaps.fixedPoint([Float](repeating: 1.0 / 30, count: 30))
        #expect(fixed.reduce(0) { $0 + Int($1) } == 256)
        #expect(fixed.allSatisfy { $0 == 8 || $0 == 9 })
        #expect(AxisTaps.fixedPoint([1]) == [256])
        #expect(AxisTaps.fixedPoint([0.5, 0.5]) == [128, 128])
    }

    /// The ratios that trapped, end to end: a flat frame stays flat through the fixed-point passes.
    @Test(arguments: [(7680, 4320, 256, 256), (1, 1, 288, 288), (2, 2, 288, 288), (3, 5, 288, 480),
                      (1920, 1080, 32, 16), (4096, 2160, 1, 1), (288, 288, 1, 1)])
    func extremeRatiosResampleAFlatFrameFlat(size: (Int, Int, Int, Int)) {
        let (width, height, targetWidth, targetHeight) = size
        let pixels = [UInt8](repeating: 200, count: width * height * 4)
        var planes = [Float](repeating: -1, count: targetWidth * targetHeight * 3)
        let down = Resampler(sourceWidth: width, sourceHeight: height, targetWidth: targetWidth, targetHeight: targetHeight)
        pixels.withUnsafeBufferPointer { source in
            down.bgraToRGB(BGRAImage(base: source.baseAddress!, width: width, height: height, stride: width * 4),
                           into: &planes, pixelStep: 1, rowStride: targetWidth, planeStride: targetWidth * targetHeight)
        }
        #expect(planes.allSatisfy { abs($0 - 200.0 / 255) < 1e-3 })
        let alpha = [Float](repeating: 0.5, count: targetWidth * targetHeight)
        var out = [UInt8](repeating: 0, count: width * height)
        let up = Resampler(sourceWidth: targetWidth, sourceHeight: targetHeight, targetWidth: width, targetHeight: height)
        alpha.withUnsafeBufferPointer { source in
            out.withUnsafeMutableBufferPointer { plane in
                up.resample(source.baseAddress!, sourceStride: targetWidth,
                            into: GrayImage(base: plane.baseAddress!, width: width, height: height, stride: width))
            }
        }
        #expect(out.allSatisfy { $0 == 127 || $0 == 128 })  // 0.5·255 = 127.5, within a level
    }
}
