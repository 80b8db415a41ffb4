// libcurl for the inference-server client (Sources/MatteEngine/Remote). curl_easy_setopt and
// curl_easy_getinfo are variadic, which Swift cannot call: one typed wrapper per argument kind.
#ifndef MATANYONE_CCURL_SHIM_H
#define MATANYONE_CCURL_SHIM_H
#include <curl/curl.h>

typedef size_t (*mat_curl_data_callback)(char *buffer, size_t size, size_t count, void *user);
typedef int (*mat_curl_seek_callback)(void *user, curl_off_t offset, int origin);

static inline CURLcode mat_curl_set_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode mat_curl_set_offset(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode mat_curl_set_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode mat_curl_set_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode mat_curl_set_headers(CURL *handle, struct curl_slist *headers) {
    return curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers);
}
static inline CURLcode mat_curl_set_callback(CURL *handle, CURLoption option, mat_curl_data_callback callback) {
    return curl_easy_setopt(handle, option, callback);
}
static inline CURLcode mat_curl_set_seek(CURL *handle, mat_curl_seek_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_SEEKFUNCTION, callback);
}
static inline CURLcode mat_curl_get_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}
#endif
