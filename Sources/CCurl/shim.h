#ifndef STOREBACKUP_CCURL_SHIM_H
#define STOREBACKUP_CCURL_SHIM_H
#include <curl/curl.h>

/// curl_easy_setopt and curl_easy_getinfo are variadic; Swift needs one typed entry per argument kind.
static inline CURLcode sb_curl_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode sb_curl_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode sb_curl_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode sb_curl_setopt_off(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}
typedef size_t (*sb_curl_data_callback)(char *buffer, size_t size, size_t count, void *userdata);
static inline CURLcode sb_curl_setopt_data_callback(CURL *handle, CURLoption option, sb_curl_data_callback callback) {
    return curl_easy_setopt(handle, option, callback);
}
typedef int (*sb_curl_progress_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);
static inline CURLcode sb_curl_setopt_progress_callback(CURL *handle, sb_curl_progress_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, callback);
}
typedef int (*sb_curl_seek_callback)(void *userdata, curl_off_t offset, int origin);
static inline CURLcode sb_curl_setopt_seek_callback(CURL *handle, sb_curl_seek_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_SEEKFUNCTION, callback);
}
static inline CURLcode sb_curl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode sb_curl_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLcode sb_curl_getinfo_string(CURL *handle, CURLINFO info, char **value) {
    return curl_easy_getinfo(handle, info, value);
}

#endif
