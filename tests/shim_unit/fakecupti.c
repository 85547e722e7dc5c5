/* fakecupti.c: a tiny stand-in for libcupti used by tests/test_shim_unit.py.
 * Only what the shim calls; the harness drives "API calls" (fake_api) and
 * "kernel completions" (fake_kernel) by hand. FAKE_CUPTI_FAIL=<CUptiResult>
 * makes cuptiSubscribe fail with that code. */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
static CUpti_CallbackFunc cb; static void* cbud; static int subscribed;
static unsigned char en[3][1024];
static CUpti_BuffersCallbackRequestFunc breq; static CUpti_BuffersCallbackCompleteFunc bdone;
static int act_on; static uint8_t* buf; static size_t bsize, bused; static size_t dropped;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* s, CUpti_CallbackFunc f, void* ud){ const char* fe=getenv("FAKE_CUPTI_FAIL"); if(fe && *fe) return (CUptiResult)atoi(fe); if(subscribed) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED; cb=f; cbud=ud; subscribed=1; *s=(CUpti_SubscriberHandle)0x1234; fprintf(stderr,"FAKE subscribe\n"); return CUPTI_SUCCESS;}
CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle s){ subscribed=0; memset(en,0,sizeof en); fprintf(stderr,"FAKE unsubscribe\n"); return CUPTI_SUCCESS;}
CUptiResult cuptiEnableCallback(uint32_t e, CUpti_SubscriberHandle s, CUpti_CallbackDomain d, CUpti_CallbackId id){ if(id>=1024) return CUPTI_ERROR_INVALID_PARAMETER; en[d][id]=e; return CUPTI_SUCCESS;}
CUptiResult cuptiActivityEnable(CUpti_ActivityKind k){ act_on=1; return CUPTI_SUCCESS;}
CUptiResult cuptiActivityDisable(CUpti_ActivityKind k){ act_on=0; return CUPTI_SUCCESS;}
CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc a, CUpti_BuffersCallbackCompleteFunc b){ breq=a; bdone=b; return CUPTI_SUCCESS;}
CUptiResult cuptiActivityGetNextRecord(uint8_t* b, size_t valid, CUpti_Activity** r){
  uint8_t* p = *r ? (uint8_t*)*r + sizeof(CUpti_ActivityKernel10) : b;
  if (p + sizeof(CUpti_ActivityKernel10) > b + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *r=(CUpti_Activity*)p; return CUPTI_SUCCESS;}
CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext c, uint32_t s, size_t* d){ *d=dropped; dropped=0; return CUPTI_SUCCESS;}
CUptiResult cuptiActivityFlushAll(uint32_t f){ pthread_mutex_lock(&mu); uint8_t* b=buf; size_t s=bsize,u=bused; buf=0; bused=0; pthread_mutex_unlock(&mu); if(b && bdone) bdone(NULL,0,b,s,u); return CUPTI_SUCCESS;}
CUptiResult cuptiFinalize(void){ cuptiActivityFlushAll(1); subscribed=0; memset(en,0,sizeof en); act_on=0; breq=0; bdone=0; fprintf(stderr,"FAKE finalize\n"); return CUPTI_SUCCESS;}
CUptiResult cuptiGetResultString(CUptiResult r, const char** s){ *s="fake error"; return CUPTI_SUCCESS;}
CUptiResult cuptiGetVersion(uint32_t* v){ *v=130001; return CUPTI_SUCCESS;}
/* test helpers */
int fake_subscribed(void){ return subscribed; }
void fake_api(int dom, int cbid, int site, const void* params, uint32_t corr){
  if(!subscribed || !en[dom][cbid]) return;
  CUpti_CallbackData d; memset(&d,0,sizeof d); d.callbackSite=site; d.functionParams=params; d.correlationId=corr;
  cb(cbud,(CUpti_CallbackDomain)dom,cbid,&d);}
void fake_kernel(const char* name, uint32_t corr, uint64_t start, uint64_t end){
  if(!act_on) return;
  pthread_mutex_lock(&mu);
  if(!buf){ size_t mr; breq(&buf,&bsize,&mr); bused=0; if(!buf){ dropped++; pthread_mutex_unlock(&mu); return;} }
  if(bused+sizeof(CUpti_ActivityKernel10)>bsize){ uint8_t* b=buf; size_t s=bsize,u=bused; size_t mr; breq(&buf,&bsize,&mr); bused=0; pthread_mutex_unlock(&mu); bdone(NULL,0,b,s,u); pthread_mutex_lock(&mu); if(!buf){dropped++; pthread_mutex_unlock(&mu); return;} }
  CUpti_ActivityKernel10* k=(CUpti_ActivityKernel10*)(buf+bused); memset(k,0,sizeof *k);
  k->kind=CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL; k->start=start; k->end=end; k->name=name; k->correlationId=corr; k->deviceId=0; k->streamId=7; k->contextId=1;
  bused+=sizeof *k; pthread_mutex_unlock(&mu);}
